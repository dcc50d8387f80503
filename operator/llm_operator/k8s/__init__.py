"""Talking to the API server: the REST client, the managed kinds, desired-vs-live diffs, and
leadership."""
