"""The replicas: what the router knows of each, their health and load, how they are found,
stalls, and warm start."""
