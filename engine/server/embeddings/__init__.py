"""POST /v1/embeddings: the served model's (or a LoRA adapter's) final hidden states, pooled
(engine/inputs/pooling_params.py), one engine request per input, batched with everything else."""
