"""Quality of each precision mode: the mean negative log-likelihood per token of an English text
under the built-in model, computed by pagedock and by transformers float32 on the same tokens.

    python benchmarks/quality_nll.py                    # every mode, the whole text (clean commit)
    python benchmarks/quality_nll.py --modes float32 --max-windows 1 --allow-dirty --out /tmp/q.json

The text (default: Debian's /usr/share/common-licenses/GPL-3, on every Debian and Ubuntu machine)
is tokenized with the built-in model's tokenizer and cut into consecutive windows of --window
tokens (1,024 by default; the rest, shorter than a window, is left out). Each window is one
prompt: pagedock scores it with its prompt logprobs (SamplingParams.prompt_logprobs = 0, computed
in the prefill's forward pass) through the offline LLM API, one engine per mode; transformers
scores it in float32 with one forward pass over the same GGUF, dequantized. A window's first
token has no context and is not scored. Per mode: the mean NLL (nats per scored token), its
difference to transformers' in % of it, whether that is within 1 % (the bar for the default,
issue 40), and the mean and largest per-token |logprob| difference to transformers'.

Licence texts are common in code corpora, so the text is held out from nothing anyone can check
and its NLL is low; what the result reads is each mode's distance from the reference on the same
tokens. Writes benchmarks/results/quality_nll_<commit>.json; a tree with uncommitted changes is
refused unless --allow-dirty (its commit is then marked `+dirty`: a result not to quote).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import git_commit, machine_info
from pagedock.errors import ConfigError
from pagedock.limits import DEFAULT_MODEL

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_TEXT = Path("/usr/share/common-licenses/GPL-3")
WITHIN_PCT = 1.0

MODES: dict[str, dict[str, str]] = {
    # Float32 throughout: weights, activations, GEMMs, KV cache.
    "float32": {"dtype": "float32"},
    # The default: bf16 GEMMs and KV cache where the CPU multiplies bf16 natively, else float32.
    "auto": {},
    "kv-bfloat16": {"dtype": "float32", "kv_cache_dtype": "bfloat16"},
    "kv-int8": {"dtype": "float32", "kv_cache_dtype": "int8"},
    # bf16 GEMMs alone (float32 KV cache); needs native bf16.
    "gemm-bfloat16": {"cpu_gemm_dtype": "bfloat16", "kv_cache_dtype": "float32"},
    # Weights and activations in bf16.
    "bfloat16": {"dtype": "bfloat16"},
    # Int8 weights (per output channel) and int8 GEMM inputs (per token), quantized at load.
    "w8a8": {"quantization": "w8a8"},
}


def windows_of(token_ids: Sequence[int], window: int, max_windows: int | None) -> list[list[int]]:
    """Consecutive, non-overlapping windows of `window` tokens (the shorter rest left out)."""
    count = len(token_ids) // window
    if max_windows is not None:
        count = min(count, max_windows)
    return [list(token_ids[i * window : (i + 1) * window]) for i in range(count)]


def token_logprobs_of(prompt: Sequence[int], prompt_logprobs: Sequence[Any] | None) -> list[float]:
    """The log-probability of each prompt token after the first, from a RequestOutput's
    prompt_logprobs (None first, then {token id: Logprob})."""
    if (
        prompt_logprobs is None
        or len(prompt_logprobs) != len(prompt)
        or prompt_logprobs[0] is not None
    ):
        raise ValueError("prompt logprobs do not cover the prompt")
    pairs = zip(prompt[1:], prompt_logprobs[1:], strict=True)
    return [entry[token].logprob for token, entry in pairs]


def mean_nll(logprobs: Sequence[Sequence[float]]) -> float:
    """Mean negative log-likelihood per scored token, in nats."""
    values = [lp for window in logprobs for lp in window]
    return -math.fsum(values) / len(values)


def compare(reference: list[list[float]], got: list[list[float]]) -> dict[str, Any]:
    """A mode's mean NLL against the reference's, and how far its per-token logprobs moved."""
    ref_nll, nll = mean_nll(reference), mean_nll(got)
    gaps = [
        abs(a - b)
        for ref_window, window in zip(reference, got, strict=True)
        for a, b in zip(ref_window, window, strict=True)
    ]
    difference_pct = (nll - ref_nll) / ref_nll * 100
    return {
        "mean_nll": nll,
        "difference_pct": difference_pct,
        f"within_{WITHIN_PCT:g}_pct": abs(difference_pct) <= WITHIN_PCT,
        "mean_abs_logprob_diff": math.fsum(gaps) / len(gaps),
        "max_abs_logprob_diff": max(gaps),
    }


def result_path(results_dir: Path, commit: str | None) -> Path:
    return results_dir / f"quality_nll_{commit or 'unknown'}.json"


def check_commit(commit: str | None, allow_dirty: bool) -> None:
    """SystemExit for a tree with uncommitted changes (or no commit), unless allowed."""
    if allow_dirty:
        return
    if commit is None or commit.endswith("+dirty"):
        sys.exit(
            f"the checkout is at {commit or 'no known commit'}: a quoted result comes from a clean "
            "commit; commit first, or pass --allow-dirty for a check (marked +dirty)"
        )


def pagedock_logprobs(settings: dict[str, str], windows: list[list[int]]) -> dict[str, Any]:
    """Each window's token logprobs from one engine with `settings`, and what it resolved to."""
    from engine import LLM, SamplingParams
    from engine.device import pick_cpu_gemm_dtype

    llm = LLM(max_model_len=len(windows[0]) + 1, **settings)
    engine = llm.engine
    started = time.perf_counter()
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    outputs = llm.generate(windows, params, use_tqdm=False)
    seconds = time.perf_counter() - started
    gemm = pick_cpu_gemm_dtype(
        engine.config.cpu_gemm_dtype, engine.config.dtype, engine.dtype, engine.device
    )
    resolved = {
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "gemm_dtype": str(gemm).removeprefix("torch."),
        "kv_cache_dtype": str(engine.runner.kv_cache_dtype).removeprefix("torch."),
        "quantization": engine.config.quantization,
    }
    pairs = zip(windows, outputs, strict=True)
    logprobs = [token_logprobs_of(w, o.prompt_logprobs) for w, o in pairs]
    llm.shutdown()
    return {"logprobs": logprobs, "resolved": resolved, "seconds": seconds}


def transformers_logprobs(gguf: Path, windows: list[list[int]]) -> list[list[float]]:
    """Each window's token logprobs from transformers float32 on the same GGUF."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    ).eval()
    out = []
    with torch.inference_mode():
        for window in windows:
            logits = model(torch.tensor([window])).logits[0, :-1].float()
            targets = torch.tensor(window[1:]).unsqueeze(1)
            out.append(logits.log_softmax(dim=-1).gather(1, targets).squeeze(1).tolist())
    return out


def run_modes(
    modes: list[str], windows: list[list[int]], reference: list[list[float]]
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in modes:
        try:
            run = pagedock_logprobs(MODES[name], windows)
        except ConfigError as e:  # a mode this machine does not offer (bf16 GEMMs)
            results[name] = {"settings": MODES[name], "skipped": str(e)}
            print(f"{name}: skipped ({e})", flush=True)
            continue
        summary = compare(reference, run["logprobs"])
        results[name] = {"settings": MODES[name], "resolved": run["resolved"], **summary}
        results[name]["seconds"] = round(run["seconds"], 2)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--window", type=int, default=1024, help="tokens per window")
    parser.add_argument("--max-windows", type=int, default=None, help="at most this many")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    parser.add_argument("--out", type=Path, default=None, help="default: results/, by commit")
    parser.add_argument("--note", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    commit = git_commit(ROOT)
    check_commit(commit, args.allow_dirty)
    from pagedock.models.registry import resolve_model
    from pagedock.text.tokenizer import Tokenizer

    gguf = resolve_model(DEFAULT_MODEL).path
    text = args.text.read_text()
    # One continuous text: no special tokens (SmolLM2 adds none anyway).
    token_ids = Tokenizer.from_gguf(gguf).encode(text, add_special_tokens=False)
    windows = windows_of(token_ids, args.window, args.max_windows)
    if not windows:
        sys.exit(f"{args.text} has {len(token_ids)} tokens: not one window of {args.window}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    reference = transformers_logprobs(gguf, windows)
    print(f"transformers float32: mean NLL {mean_nll(reference):.5f}", flush=True)
    modes = run_modes(args.modes, windows, reference)
    result = {
        "benchmark": "mean NLL per token of a text, pagedock's precision modes vs transformers",
        "started": started,
        "note": args.note,
        "commit": commit,
        "machine": machine_info(),
        "model": DEFAULT_MODEL,
        "text": {
            "path": str(args.text),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
            "num_tokens": len(token_ids),
        },
        "window_tokens": args.window,
        "num_windows": len(windows),
        "scored_tokens": sum(len(w) - 1 for w in windows),
        "reference": {"system": "transformers float32, same GGUF", "mean_nll": mean_nll(reference)},
        "modes": modes,
    }
    out = args.out or result_path(RESULTS, commit)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
