"""Finding models (torch-free): the registry of built-in names and local paths, the HF Hub,
GGUF headers, and `pagedock download`."""
