"""Requests on their way in: validation, continuation of a cut stream, the engine request."""
