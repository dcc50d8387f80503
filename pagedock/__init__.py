"""pagedock's shared, torch-free base: the `pagedock` command (`pagedock.cli`), the options
convention of every program (`pagedock.options`) and the limits they share (`pagedock.limits`).

Every image installs it; it imports neither `engine`, `router` nor `llm_operator` on its own.
"""
