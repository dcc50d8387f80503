"""pagedock's shared, torch-free foundation, the lowest layers of all three programs.

    limits.py, errors.py   the numbers every program shares, and the error classes
    protocol/              the OpenAI-compatible request and response models
    http/                  FastAPI pieces: errors in OpenAI's shape, the API-key guard, limits
    kv/                    block hashing and both KV-event wire formats (pagedock's, vLLM's)
    models/                the model registry, the HF Hub, GGUF files, `pagedock download`
    text/                  tokenizer, chat template, prompt rendering, detokenizer, stop strings
    options.py, cli.py     the options convention and the `pagedock` command

The engine and the router both stand on it; it imports neither `engine`, `router` nor
`llm_operator`, and never torch.
"""
