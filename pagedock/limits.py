"""Limits and names that the engine, the router and the operator must agree on: one source each.

Torch-free and import-free, so every image (engine, router, operator) can read it. The `Literal`
types feed the operator's CRD (an enum the API server enforces); the tuples feed the runtime checks
of EngineConfig and RouterConfig.
"""

from typing import Final, Literal, get_args

DEFAULT_MODEL: Final = "smollm2-135m-instruct"
"""The built-in model `pagedock serve` loads, and the tokenizer `pagedock route` uses, by
default."""

BlockSize = Literal[8, 16, 32, 64, 128]
BLOCK_SIZES: Final[tuple[int, ...]] = get_args(BlockSize)
"""Tokens per KV block the engine supports (its kernels assume one of these)."""
DEFAULT_BLOCK_SIZE: Final = 16

Dtype = Literal["auto", "float32", "float16", "bfloat16"]
DTYPES: Final[tuple[str, ...]] = get_args(Dtype)
"""Weight and activation dtypes; auto = float32 on CPU (its GEMMs in bf16 where the CPU has native
bf16: CPU_GEMM_DTYPES), bfloat16 on GPU."""

CpuGemmDtype = Literal["auto", "float32", "bfloat16"]
CPU_GEMM_DTYPES: Final[tuple[str, ...]] = get_args(CpuGemmDtype)
"""The dtype a float32 CPU engine's linear layers hold their weights and multiply in; auto =
bfloat16 where the CPU multiplies bf16 natively (AVX512-BF16 or AMX) and dtype is auto."""

QuantizationMethod = Literal["w8a8"]
QUANTIZATION_METHODS: Final[tuple[str, ...]] = get_args(QuantizationMethod)
"""Weight quantization at load (`--quantization`, vLLM's flag): w8a8 = int8 weights (per output
channel) and int8 inputs (per token) multiplied on the CPU's VNNI units through oneDNN."""

KvCacheDtype = Literal["auto", "float32", "bfloat16", "int8"]
KV_CACHE_DTYPES: Final[tuple[str, ...]] = get_args(KvCacheDtype)
"""The dtype K and V are stored in; auto = the activation dtype. bfloat16 on a float32 CPU engine
halves the cache's bytes per token (the C++ kernels widen each row to float32 as they read it);
int8 there stores each row quantised with its own scale (~27 % of float32's bytes at head_dim
64)."""

AttentionBackendName = Literal["torch", "torch-sdpa", "triton"]
ATTENTION_BACKENDS: Final[tuple[str, ...]] = get_args(AttentionBackendName)
"""torch (CPU, C++ decode kernel), torch-sdpa (pure torch), triton (GPU)."""

RoutingPolicy = Literal["prefix-aware", "round-robin", "least-loaded", "session"]
ROUTING_POLICIES: Final[tuple[str, ...]] = get_args(RoutingPolicy)
"""How the router picks an engine replica."""

MAX_BODY_BYTES: Final = 8 * 1024 * 1024
"""Largest request body the engine (by default) and the router accept; 413 beyond."""
SMALL_BODY_BYTES: Final = 64 * 1024
"""The router keeps 1/BODY_RESERVE_FRACTION of its body budget for bodies up to this size."""
BODY_RESERVE_FRACTION: Final = 16


def largest_body_within(max_bytes: int) -> int:
    """The largest body the router's body budget of `max_bytes` takes: all of it but the small
    bodies' reserve (router/http/body_budget.py)."""
    return max_bytes - max_bytes // BODY_RESERVE_FRACTION


def _smallest_body_budget() -> int:
    budget = MAX_BODY_BYTES * BODY_RESERVE_FRACTION // (BODY_RESERVE_FRACTION - 1) - 2 * 16
    while largest_body_within(budget) < MAX_BODY_BYTES:
        budget += 1
    return budget


MIN_BODY_BUDGET_BYTES: Final = _smallest_body_budget()
"""The smallest router body budget that takes a MAX_BODY_BYTES body beside the reserve."""


# ---- what one request may carry -----------------------------------------------------------------
# Bounds checked where a request enters (the protocol models for HTTP, SamplingParams for every
# caller), so a value no step can handle is a 400 for its sender, never a failed batch for others.

SEED_MIN: Final = -(2**63)
SEED_MAX: Final = 2**64 - 1
"""torch.Generator.manual_seed's range; child seeds of n > 1 wrap around inside it."""
MAX_N: Final = 128
"""Completions per prompt (n, best_of)."""
MAX_PROMPTS: Final = 2048
"""Prompts in one completions request (a batch), as many as OpenAI's embeddings take."""
MAX_REQUEST_SEQUENCES: Final = 2048
"""Sequences one request may generate (prompts x n): each is an engine request with its own state,
so this bounds what one HTTP request may queue and hold."""
MAX_LOGPROBS: Final = 20
"""Top alternatives per token (logprobs, top_logprobs), as OpenAI."""
MAX_INT32: Final = 2**31 - 1
"""Largest token id, top_k, max_tokens and min_tokens: the engine's tensors index with int32/int64
and ids beyond int32 are no model's."""
MAX_STOP_STRINGS: Final = 64
"""Stop strings per request: each is matched against every new piece of text."""
MAX_STOP_STRING_CHARS: Final = 1024
"""Characters per stop string."""
MAX_TOKEN_ID_LIST: Final = 1024
"""Entries in a per-request token-id list (stop_token_ids): each becomes a per-step ban."""
MAX_CONTINUATION_TOKENS: Final = 131_072
"""Token ids a continuation may carry (a 400 when the body is parsed, before any engine work): the
output tokens a router relayed before a failover, 128 Ki being more than an answer runs to; the
engine then checks them against its own context length and max_tokens."""
MAX_STRUCTURED_OUTPUT_CHARS: Final = 64 * 1024
"""Characters of one structured-outputs constraint (a JSON schema as JSON text, a regex, a grammar,
or all choices together): compiling it costs time and memory that grow with its size."""
MAX_CHOICES: Final = 1024
"""Entries of a structured-outputs `choice` list."""
MAX_CACHE_SALT_CHARS: Final = 256
"""Characters of a request's `cache_salt` (it is hashed once per request; a tenant's name or a
digest fits many times over)."""
MAX_STRUCTURED_OUTPUT_DEPTH: Final = 64
"""Levels of nested objects and arrays in a structured-outputs JSON schema (`{}` is one level,
`{"properties": {"a": {}}}` three): the grammar compiler recurses once per level, and a schema
nested hundreds deep costs seconds to compile, or exhausts the parser's recursion."""
MAX_SCHEMA_PROPERTIES: Final = 512
"""Properties in a structured-outputs JSON schema, all its objects together: compile time grows
with their cube (SmolLM2's vocabulary: 256 took 0.12 s, 512 took 0.49 s, 1,024 took 3.6 s,
benchmarks/results/request_costs.json), and a compilation can't be interrupted."""
MAX_TOOLS: Final = 128
"""Tools per chat request (OpenAI's limit): each is rendered into the prompt."""
MAX_TOOLS_JSON_CHARS: Final = MAX_STRUCTURED_OUTPUT_CHARS
"""Characters of a request's `tools` as JSON: a forced call guides decoding by their schemas."""
