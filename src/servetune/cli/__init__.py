"""The command line: the dispatcher (main), one module per command family (commands for the
Hydra apps simulate and tune, export, golden, report) and the light Hydra apps (hydra_apps)."""
