"""The KV cache as other processes see it (torch-free): block hashing, pagedock's NDJSON event
stream (GET /v1/kv/events) and vLLM's ZMQ/msgpack event wire format."""
