"""Speculative decoding's bookkeeping (torch-free): draft proposers and the per-request rules of
when to propose. The drafts are verified by engine/sampling/rejection_sampler.py."""
