"""Loading model weights into the engine's layers: GGUF and safetensors, the weight cache, and
tensor-parallel shards. Finding a model (registry, HF Hub, GGUF headers) is in pagedock/models/."""
