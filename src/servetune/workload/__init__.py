"""Request traces as the engine consumes them: the trace type, the readers of CSV, JSONL and
vLLM benchmark files, slicing, synthetic arrivals, replicas, predictions and patience, and the
bundled traces (data/)."""
