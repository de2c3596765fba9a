"""KV-cache events and metrics: in-process sinks, vLLM's ZMQ wire format, Prometheus."""
