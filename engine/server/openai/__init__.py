"""The OpenAI-compatible endpoints' handlers: completions, chat, tokenize, render, and what they
share (sampling parameters, logprobs, structured outputs, bounded prompt work, generation)."""
