"""The engine's top: LLMEngine (one step), the engine loop thread, AsyncEngine for the server,
the output processor, and the offline `LLM`."""
