"""Cross-checks of servetune against real serving engines."""
