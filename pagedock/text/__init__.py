"""Text in and out: tokenizer, chat template, incremental detokenizer and stop strings.
Torch-free."""
