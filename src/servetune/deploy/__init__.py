"""From a tuned or chosen policy to a real engine: vLLM flags and config files (export), the
choice of a setting from a report's runs (choose), and the neural score's gateway export."""
