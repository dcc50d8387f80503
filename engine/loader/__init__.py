"""Finding and loading model weights: the model registry, the HF Hub, GGUF files, the weight cache."""
