"""pagedock's prefix-aware router: sends each request to the engine replica that already holds the
longest run of its KV blocks, unless that replica's queue makes another one faster.

    kv/        the KV index, the prompt hasher and the event subscribers that fill the index
    replicas/  replicas, their health, load and discovery, stall watch, warm start
    http/      proxying with failover, stream resume, the hold queue, the upstream session
    picker/    the Gateway API Inference Extension's endpoint picker (ext_proc over gRPC)
    policies/  routing policies

Torch-free (its container image is slim): it imports only `pagedock`, never `engine`.
"""
