"""The router as a program: its FastAPI app, the context that builds its parts, and
`pagedock route`."""
