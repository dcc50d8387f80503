"""Model building blocks: RMSNorm, rotary embeddings, activations, packed CPU linears."""
