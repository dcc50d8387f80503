"""The engine's KV events for routers: the NDJSON stream (GET /v1/kv/events) and vLLM's ZMQ
publisher."""
