"""The engine's OpenAI-compatible HTTP server (FastAPI). Importing this package is cheap; the app
is built by `engine.server.app.build_app`, and `pagedock serve` runs it (`engine.server.serve`)."""
