"""Scheduling and KV-cache bookkeeping: requests, the scheduler, the block pool, block hashes and
KV events. Torch-free."""
