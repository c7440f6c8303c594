"""Running scenarios: the driver over chunks of the compiled loop, sharding over devices, the
metrics of a finished run, progress, run estimates, run folders and their logs, the simulate
outputs, and the Python API (api)."""
