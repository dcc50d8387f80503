"""Which replica holds which KV block: the index, the hashes of a prompt's blocks, and the
subscribers that follow each replica's KV events into the index."""
