"""`spec.engine`: the engine's settings, as `pagedock serve` flags (`max_num_seqs` ->
`maxNumSeqs` -> `--max-num-seqs`), and its vLLM-format KV events."""

from pydantic import Field, model_validator

from llm_operator.api.types import (
    Quantity,
    RawObject,
    SpecModel,
    SpeculativeConfigJson,
    cel_rules,
    section,
)
from pagedock.limits import (
    DEFAULT_BLOCK_SIZE,
    BlockSize,
    CpuGemmDtype,
    Dtype,
    KvCacheDtype,
    QuantizationMethod,
)


class KVEventsSpec(SpecModel):
    model_config = cel_rules(
        ("self.port != self.replayPort", "kvEvents.port and kvEvents.replayPort must differ"),
        (
            "self.port != 8000 && self.replayPort != 8000",
            "kvEvents ports must not be 8000 (the engine's HTTP port)",
        ),
    )

    enabled: bool = False
    """Publish KV events in vLLM's ZMQ format (for llm-d, Dynamo and other vLLM-event consumers),
    topic `kv@<pod IP>:8000@<served model name>`. They carry raw prompt token ids and the ports
    have no authentication: the engines' NetworkPolicy admits them only from the router's pods and
    the `allowedFrom` peers."""
    port: int = Field(5557, ge=1, le=65535)
    """The PUB port (`endpoint: tcp://*:<port>`)."""
    replay_port: int = Field(5558, ge=1, le=65535)
    """The replay ROUTER port (`replay_endpoint: tcp://*:<replayPort>`)."""
    allowed_from: list[RawObject] = Field(default_factory=list)
    """More NetworkPolicy peers admitted to both ports (e.g. an llm-d endpoint picker's pods)."""

    @model_validator(mode="after")
    def _ports_differ(self) -> "KVEventsSpec":
        if self.port == self.replay_port:
            raise ValueError("engine.kvEvents.port and engine.kvEvents.replayPort must differ")
        if 8000 in (self.port, self.replay_port):
            raise ValueError("engine.kvEvents ports must not be 8000 (the engine's HTTP port)")
        return self


class EngineSpec(SpecModel):
    model_config = cel_rules(
        (
            "self.maxNumBatchedTokens >= self.maxNumSeqs",
            "maxNumBatchedTokens must be >= maxNumSeqs",
        ),
        (
            "self.enableChunkedPrefill || !has(self.maxModelLen) || "
            "self.maxNumBatchedTokens >= self.maxModelLen",
            "without chunked prefill, maxNumBatchedTokens must be >= maxModelLen",
        ),
    )

    block_size: BlockSize = DEFAULT_BLOCK_SIZE
    """Tokens per KV-cache block: 8, 16, 32, 64 or 128 (the sizes the engine supports)."""
    max_num_seqs: int = Field(256, ge=1)
    """The most sequences in one batch."""
    max_num_batched_tokens: int = Field(2048, ge=1)
    """The token budget of one engine step."""
    max_model_len: int | None = Field(None, ge=1)
    """Context length cap; the model's own when unset."""
    enable_prefix_caching: bool = True
    """Reuse cached KV blocks of shared prompt prefixes."""
    enable_chunked_prefill: bool = True
    """Split long prompts into chunks that share a step with decodes."""
    max_step_ms: float | None = Field(None, ge=0)
    """Inter-token target in milliseconds: a step with running decodes takes only the prefill
    that keeps it under this (0 = none); unset, the engine's default (a fifth of the token
    budget in prefill beside decodes)."""
    long_prefill_token_threshold: int = Field(0, ge=0)
    """A prompt with more tokens than this left is prefilled at most this many a step (a short
    request arriving meanwhile starts within a short step); 0 = no cap."""
    speculative_config: SpeculativeConfigJson | None = None
    """Speculative decoding as vLLM's `--speculative-config` JSON (docs/server.md); unset: off."""
    tensor_parallel_size: int = Field(1, ge=1)
    """Ranks one engine shards the model over (one GPU each): resources.gpus must equal it when
    GPUs are requested; on CPU the ranks share the pod's cores."""
    dtype: Dtype = "auto"
    """Weight and activation dtype."""
    cpu_gemm_dtype: CpuGemmDtype = "auto"
    """CPU engines: the dtype the linear layers multiply in; auto = bfloat16 where the CPU has
    native bf16 (AVX512-BF16 or AMX) and dtype is auto, else float32."""
    quantization: QuantizationMethod | None = None
    """CPU engines: quantize weights at load; w8a8 = int8 weights and inputs on the VNNI units
    (lossy: docs/server.md); unset = off. Not with LoRA adapters."""
    kv_cache_dtype: KvCacheDtype = "auto"
    """The dtype K and V are stored in; auto = bfloat16 where the CPU GEMMs are bf16, else the
    activation dtype (GPUs store the activation dtype only)."""
    kv_cache_memory: Quantity | None = None
    """Memory for the KV cache (e.g. 8Gi); sized from free memory when unset."""
    num_kv_blocks: int | None = Field(None, ge=1)
    """An exact KV block count; overrides kvCacheMemory."""
    max_loras: int | None = Field(None, ge=1)
    """LoRA adapters that may have running requests at once (`--max-loras`, the engine's weight
    slots; its default 4 when unset). Set, it turns LoRA on even without adapters."""
    max_lora_rank: int | None = Field(None, ge=1)
    """The largest adapter rank accepted (`--max-lora-rank`; the engine's default 64 when unset)."""
    extra_args: list[str] = Field(default_factory=list)
    """Extra `pagedock serve` flags, appended verbatim."""
    kv_events: KVEventsSpec = section(KVEventsSpec)
    """vLLM-format KV events on ZMQ (off by default; see docs/ecosystem.md)."""

    @model_validator(mode="after")
    def _budget_fits(self) -> "EngineSpec":
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("engine.maxNumBatchedTokens must be >= engine.maxNumSeqs")
        too_short = (
            self.max_model_len is not None and self.max_num_batched_tokens < self.max_model_len
        )
        if not self.enable_chunked_prefill and too_short:
            raise ValueError(
                "without chunked prefill, engine.maxNumBatchedTokens must be >= engine.maxModelLen"
            )
        return self
