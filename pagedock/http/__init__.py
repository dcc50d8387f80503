"""HTTP pieces the engine's server and the router share (FastAPI, torch-free): errors in OpenAI's
shape, the API-key guard, and the limits on connections and headers."""
