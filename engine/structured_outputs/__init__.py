"""Structured outputs (guided decoding): constraints compiled by xgrammar, enforced by the sampler.

grammar_compiler.py turns a StructuredOutputsParams into a compiled grammar off the engine thread;
structured_output_manager.py holds each guided request's matcher on the engine thread, fills the
step's token bitmask and advances the matchers with the sampled tokens. docs/structured-outputs.md.
"""
