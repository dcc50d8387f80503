"""Engine configuration: one dataclass, validated at construction. CLI flags, PAGEDOCK_* env vars,
CRD fields and Helm values mirror these field names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.tenancy_config import TenancyConfig
from pagedock.byte_size import parse_bytes
from pagedock.errors import ConfigError
from pagedock.limits import (
    ATTENTION_BACKENDS,
    BLOCK_SIZES,
    CPU_GEMM_DTYPES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MODEL,
    DTYPES,
    KV_CACHE_DTYPES,
    QUANTIZATION_METHODS,
)
from pagedock.options import option_meta
from pagedock.speculative_config import SpeculativeConfig

# KV cache budget when num_kv_blocks is not given. On CPU the cache shares RAM with everything
# else, so the default is a fixed, modest amount rather than a fraction of the machine.
DEFAULT_CPU_KV_CACHE_MEMORY = 2 * 1024**3


@dataclass
class EngineConfig(TenancyConfig):
    model: str = DEFAULT_MODEL
    """Built-in model name, local .gguf file, or local HF directory."""
    dtype: str = "auto"
    """Weights and activations: auto (float32 on CPU, bfloat16 on GPU), float32, float16,
    bfloat16."""
    cpu_gemm_dtype: str = "auto"
    """CPU float32 engines: the dtype the linear layers' weights are packed in and multiplied in
    (activations, norms and attention stay float32; the KV cache's is kv_cache_dtype). auto =
    bfloat16 where the CPU has native bf16 (AVX512-BF16 or AMX) and dtype is auto, else float32."""
    quantization: str | None = None
    """CPU float32 engines: quantize linear layers' weights at load (vLLM's flag). w8a8 = the
    QKV, output and gate/up projections' weights in int8 (a scale per output channel) and their
    inputs too (a scale per token), multiplied on the CPU's VNNI units through oneDNN (half bf16's
    weight bytes; lossy: docs/server.md has its figures). None = off. Not with LoRA."""
    kv_cache_dtype: str = "auto"
    """The dtype K and V are stored in: auto, float32, bfloat16, or int8. On a float32 CPU engine
    bfloat16 halves the bytes per token (the same kv_cache_memory holds twice the blocks, decode
    attention reads half the bytes) at bf16's precision for K and V; int8 stores each token's
    head row quantised against its largest magnitude, with a float32 scale (head_dim + 4 bytes a
    row: 0.27x float32's bytes at head_dim 64); attention still computes in float32. auto =
    bfloat16 where the GEMMs are bf16 (cpu_gemm_dtype), else the activation dtype; int8 is asked
    for by name. GPUs store the activation dtype (bfloat16) only."""
    device: str = "auto"
    """cpu, cuda, or auto (cuda when available)."""
    tensor_parallel_size: int = 1
    """Ranks (processes, one GPU each on CUDA) one engine shards the model over; rank 0 is the
    engine's own process."""
    tensor_parallel_port: int | None = None
    """TCP port on 127.0.0.1 where the ranks meet (torch.distributed rendezvous); None = a free
    one. Set it when a firewall or a fixed port plan needs to know it."""
    block_size: int = DEFAULT_BLOCK_SIZE
    """Tokens per KV block: 8, 16, 32, 64 or 128."""
    num_kv_blocks: int | None = None
    """KV blocks in the pool; None sizes the pool from kv_cache_memory."""
    kv_cache_memory: int | str | None = None
    """Bytes for the KV cache (int or '2GiB'), per tensor-parallel rank; None = 2 GiB on CPU, 90 %
    of free memory on GPU."""
    max_num_seqs: int = 256
    """Sequences running at once."""
    max_num_batched_tokens: int = 2048
    """Tokens computed per step, decodes and prefill chunks together."""
    max_model_len: int | None = None
    """Context length (prompt + output); None = the model's own."""
    enable_prefix_caching: bool = field(
        default=True, metadata=option_meta(off_flag="--no-prefix-caching")
    )
    """Reuse the KV blocks of shared prompt prefixes across requests."""
    max_step_ms: float | None = field(default=None, metadata=option_meta(metavar="MS"))
    """Inter-token target: a step with running decodes takes only as many prefill tokens as keep
    it under this many milliseconds, by the step cost the engine measures as it runs (never
    fewer than 256), stretched while prompts awaiting their first token outnumber the decodes.
    Unset: such a step prefills a fifth of max_num_batched_tokens (the same share on any CPU;
    a target in ms suits one machine's speed), the whole of it while those prompts are at least
    half as many as the decodes. 0 = none (every step may use max_num_batched_tokens). Needs
    chunked prefill. `LLM` (offline, nobody waits between tokens) defaults to 0."""
    enable_chunked_prefill: bool = field(
        default=True, metadata=option_meta(off_flag="--no-chunked-prefill")
    )
    """Split prompts longer than the step's remaining token budget across steps."""
    long_prefill_token_threshold: int = 0
    """A prompt with more tokens than this left to compute is prefilled at most this many a step
    (vLLM's rule), so a short request that arrives during a long prompt starts within a short
    step and decodes beside small chunks, where it would wait for the whole prompt. 0 = no cap
    (vLLM's default). Needs chunked prefill."""
    max_grammar_mask_ms: float = field(default=10.0, metadata=option_meta(metavar="MS"))
    """The most CPU time one token's structured-outputs mask may take, a row (ten times that for
    all the rows of one constraint), on the engine thread: a constraint over it fails its
    requests with a 400 after that step and is refused from then on (a typical JSON schema's
    takes ~0.01 ms; each ms is a ms added to every other request's step). 0 = no limit."""
    speculative_config: SpeculativeConfig | dict[str, Any] | str | None = field(
        default=None, metadata=option_meta(metavar="JSON")
    )
    """Speculative decoding, as vLLM's JSON: {"method": "ngram", "num_speculative_tokens": 4,
    "prompt_lookup_min": 2, "prompt_lookup_max": 4} (docs/server.md); None = off."""
    scheduling_policy: str = "fcfs"
    """fcfs, or priority (lower value first)."""
    seed: int = 0
    """Seed of the sampling of requests that carry no seed of their own."""
    attention_backend: str | None = None
    """Force 'torch' (CPU, C++ decode kernel), 'torch-sdpa' (pure torch) or 'triton'; None
    chooses by device."""
    chat_template: str | None = None
    """Chat template to render chats with, instead of the model's own: a file path, or the
    template itself (Jinja). The built-in model uses pagedock's tools-aware ChatML by default."""
    served_model_name: str | None = None
    """Name the API reports; None = the built-in name or the model path's basename."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None = every core this process may use."""
    enforce_eager: bool = False
    """GPU: never capture CUDA graphs, run every step eagerly (CPU steps are always eager)."""
    onednn: bool = True
    """CPU float32: run linear layers through oneDNN with weights packed at load (off: torch's
    default matmul)."""
    cpu_kernels: bool = True
    """CPU float32: the C++ kernels (paged attention, fused norm, rotary, SiLU); off: pure torch.
    Process-wide: the last engine built in a process decides."""
    cpu_kernels_cache: bool = True
    """Import the C++ CPU kernels this machine compiled before straight from their recorded
    build, skipping torch's up-to-date check (setuptools, compiler and ninja runs: up to a
    second or two of each start); off: always through torch's builder. Read by `pagedock
    serve`."""
    weights_load_strategy: str = "mmap"
    """mmap: build the model without initialising its parameters and use each weight it takes
    as stored (the embedding, norms, o_proj, down_proj) in place, from the file's memory map;
    copy: initialise every parameter, then copy each weight into it. Read by `pagedock serve`."""
    kv_cache_prefault: bool = False
    """CPU: write the KV cache's zeros at start, so every page is resident from the start (a
    memory limit too small for the cache fails the start, not a later request) and no step takes
    a page's first-touch fault; off: the pages come zeroed from the kernel as blocks first use
    them, and the start writes nothing (engine/worker/huge_pages.py). Read by `pagedock serve`."""
    weight_cache: bool = True
    """Cache a quantized GGUF's dequantized weights in the pagedock cache, so restarts skip
    dequantizing."""
    enable_lora: bool = False
    """Serve LoRA adapters beside the base model: a request may name one of lora_modules (or one
    loaded since), and requests for several adapters and the base model share every step
    (docs/lora.md).
    tensor_parallel_size 1 only; tested on the CPU."""
    max_loras: int = 4
    """LoRA adapters that may have running requests at once (the weight slots); a request for
    another adapter waits until one goes idle."""
    max_lora_rank: int = 64
    """The largest LoRA rank (r) an adapter may have."""
    lora_modules: list[str] = field(default_factory=list, metadata=option_meta(metavar="NAME=PATH"))
    """LoRA adapters to serve, as name=path: a local PEFT directory (adapter_config.json and
    adapter_model.safetensors). Needs enable_lora."""
    allow_runtime_lora_updating: bool = False
    """Serve vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter, which load and unload
    adapters while the server runs (behind the API key). vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING
    is read too. Needs enable_lora."""

    def __post_init__(self) -> None:
        self._check_numerics_and_placement()
        self._check_quantization()
        self._check_cache_and_scheduling()
        self._check_lora()
        self._check_tenancy()
        if self.kv_cache_memory is not None:
            self.kv_cache_memory = parse_bytes(self.kv_cache_memory)
        if self.speculative_config is not None:
            self.speculative_config = SpeculativeConfig.parse(self.speculative_config)
            _check(
                self.tensor_parallel_size == 1,
                "speculative_config does not work with tensor parallelism yet: "
                f"tensor_parallel_size must be 1, got {self.tensor_parallel_size}",
            )

    @property
    def speculative(self) -> SpeculativeConfig | None:
        """speculative_config, parsed (None: speculative decoding is off)."""
        spec = self.speculative_config
        return spec if isinstance(spec, SpeculativeConfig) else None

    def _check_numerics_and_placement(self) -> None:
        """dtypes, device and tensor-parallel settings."""
        _check(self.dtype in DTYPES, f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        _check(
            self.cpu_gemm_dtype in CPU_GEMM_DTYPES,
            f"cpu_gemm_dtype must be one of {CPU_GEMM_DTYPES}, got {self.cpu_gemm_dtype!r}",
        )
        _check(
            self.kv_cache_dtype in KV_CACHE_DTYPES,
            f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}",
        )
        _check(
            self.weights_load_strategy in ("mmap", "copy"),
            f"weights_load_strategy must be mmap or copy, got {self.weights_load_strategy!r}",
        )
        _check(
            self.device in ("auto", "cpu", "cuda"),
            f"device must be auto, cpu or cuda, got {self.device!r}",
        )
        _check(
            self.tensor_parallel_size >= 1,
            f"tensor_parallel_size must be at least 1, got {self.tensor_parallel_size}",
        )
        _check(
            self.tensor_parallel_port is None or 1 <= self.tensor_parallel_port <= 65535,
            f"tensor_parallel_port must be in 1..65535, got {self.tensor_parallel_port}",
        )

    def _check_quantization(self) -> None:
        """The quantization method, and the settings it needs (the device's are checked when
        the engine is built: engine/layers/w8a8_linear.py)."""
        _check(
            self.quantization is None or self.quantization in QUANTIZATION_METHODS,
            f"quantization must be one of {QUANTIZATION_METHODS} or unset, "
            f"got {self.quantization!r}",
        )
        _check(
            self.quantization is None or self.onednn,
            f"quantization {self.quantization} runs through oneDNN: it needs onednn on "
            "(drop --no-onednn / PAGEDOCK_ONEDNN=false)",
        )

    def _check_cache_and_scheduling(self) -> None:
        """The KV cache's shape, the scheduler's limits and the attention backend."""
        _check(
            self.block_size in BLOCK_SIZES,
            f"block_size must be one of {BLOCK_SIZES}, got {self.block_size}",
        )
        _check((self.max_step_ms or 0) >= 0, f"max_step_ms must be 0 or more: {self.max_step_ms}")
        _check(self.max_num_seqs >= 1, f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        threshold = self.long_prefill_token_threshold
        _check(threshold >= 0, f"long_prefill_token_threshold must be 0 or more: {threshold}")
        _check(
            not threshold or self.enable_chunked_prefill,
            "long_prefill_token_threshold needs chunked prefill: a prompt can't be capped whole",
        )
        _check(
            self.max_grammar_mask_ms >= 0,
            f"max_grammar_mask_ms must be 0 or more, got {self.max_grammar_mask_ms}",
        )
        _check(
            self.max_num_batched_tokens >= 1,
            f"max_num_batched_tokens must be at least 1, got {self.max_num_batched_tokens}",
        )
        _check(
            self.num_kv_blocks is None or self.num_kv_blocks >= 1,
            f"num_kv_blocks must be at least 1, got {self.num_kv_blocks}",
        )
        _check(
            self.max_model_len is None or self.max_model_len >= 1,
            f"max_model_len must be at least 1, got {self.max_model_len}",
        )
        _check(
            self.scheduling_policy in ("fcfs", "priority"),
            f"scheduling_policy must be fcfs or priority, got {self.scheduling_policy!r}",
        )
        _check(
            self.attention_backend is None or self.attention_backend in ATTENTION_BACKENDS,
            f"attention_backend must be one of {ATTENTION_BACKENDS}, "
            f"got {self.attention_backend!r}",
        )

    def _check_lora(self) -> None:
        """The LoRA settings, and that this engine can serve adapters."""
        _check(self.max_loras >= 1, f"max_loras must be at least 1, got {self.max_loras}")
        _check(
            self.max_lora_rank >= 1, f"max_lora_rank must be at least 1, got {self.max_lora_rank}"
        )
        _check(
            self.enable_lora or not self.lora_modules,
            f"lora_modules {self.lora_modules} need enable_lora (--enable-lora)",
        )
        _check(
            self.enable_lora or not self.allow_runtime_lora_updating,
            "allow_runtime_lora_updating (--allow-runtime-lora-updating, "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING) needs enable_lora (--enable-lora)",
        )
        _check(
            not self.enable_lora or self.tensor_parallel_size == 1,
            "enable_lora does not work with tensor parallelism yet: tensor_parallel_size must be "
            f"1, got {self.tensor_parallel_size}",
        )
        _check(
            not self.enable_lora or self.quantization is None,
            f"enable_lora does not work with quantization {self.quantization} yet: the LoRA "
            "layers wrap float linears; unset quantization or enable_lora",
        )
        self.lora_paths()  # every entry reads as name=path, each name once

    def resolve_max_model_len(self, model_len: int) -> int:
        """The context length to serve, for a model of `model_len` positions; ConfigError when
        max_model_len exceeds it, or when, with chunked prefill off, a long prompt could never
        be scheduled."""
        wanted = model_len if self.max_model_len is None else self.max_model_len
        _check(
            wanted <= model_len,
            f"max_model_len {wanted} exceeds the model's context length {model_len}",
        )
        _check(
            self.enable_chunked_prefill or self.max_num_batched_tokens >= wanted,
            "with chunked prefill off, max_num_batched_tokens "
            f"({self.max_num_batched_tokens}) must be at least max_model_len ({wanted}), or a "
            "long prompt could never be scheduled; raise it, lower max_model_len, or enable "
            "chunked prefill",
        )
        return wanted

    def lora_paths(self) -> dict[str, str]:
        """lora_modules as {name: path}, in the order given."""
        paths: dict[str, str] = {}
        for entry in self.lora_modules:
            name, sep, path = entry.partition("=")
            name, path = name.strip(), path.strip()
            _check(
                bool(sep and name and path),
                f"lora_modules entries are name=path, got {entry!r}",
            )
            _check(name not in paths, f"lora_modules names adapter {name!r} twice")
            paths[name] = path
        return paths


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
