"""Model architectures (torch)."""
