"""LoRA on /metrics: vLLM's `vllm:lora_requests_info` (max_lora, the adapters with running and
with waiting requests, the time as its value; every label set seen stays, the newest is now) and
`pagedock:lora_requests_total` per adapter; with LoRA off both read as before adapters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine import LLM
from engine.core.request import RequestTiming
from engine.core.scheduler_stats import SchedulerStats
from engine.inputs.engine_request import AdapterRef
from engine.inputs.sampling_params import SamplingParams
from engine.runtime.outputs import FinishedRequestStats, IterationStats
from engine.server.metrics import EngineMetrics
from tests.engine.lora_factories import write_adapter
from tests.server.stats_factory import scheduler_stats

MODEL = "tiny"


def samples(metrics: EngineMetrics, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of the family `name`."""
    text = metrics.render().decode()
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def lora_info(metrics: EngineMetrics) -> list[tuple[dict[str, str], float]]:
    """vllm:lora_requests_info's series, the newest (the state now) last."""
    return sorted(samples(metrics, "vllm:lora_requests_info"), key=lambda s: s[1])


def stats(running: dict[str, int], waiting: dict[str, int]) -> SchedulerStats:
    return scheduler_stats(
        num_running=sum(running.values()),
        num_waiting=sum(waiting.values()),
        running_lora_adapters=running,
        waiting_lora_adapters=waiting,
    )


def finished(lora_name: str | None, reason: str = "length") -> FinishedRequestStats:
    return FinishedRequestStats("r", None, 3, [reason], RequestTiming(0.0), lora_name)


def test_with_lora_off_the_info_names_no_adapter_and_there_is_no_adapter_counter() -> None:
    metrics = EngineMetrics(MODEL)
    metrics.set_cache_config(16, 8, True)
    metrics.observe_stats(stats({}, {}))
    metrics.observe_outputs(IterationStats(finished=[finished(None)]))
    [(labels, _)] = lora_info(metrics)
    assert labels == {"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    assert b"pagedock:lora_requests" not in metrics.render()


def test_the_info_names_running_and_waiting_adapters_comma_separated_in_order() -> None:
    metrics = EngineMetrics(MODEL, max_loras=2)
    metrics.set_cache_config(16, 8, True)
    metrics.observe_stats(stats({"sql": 2, "chat": 1}, {"code": 1, "sql": 1}))
    labels, _ = lora_info(metrics)[-1]
    assert labels == {
        "max_lora": "2",
        "running_lora_adapters": "sql,chat",
        "waiting_lora_adapters": "code,sql",
    }


def test_every_label_set_stays_and_the_newest_is_the_state_now() -> None:
    metrics = EngineMetrics(MODEL, max_loras=1)
    metrics.set_cache_config(16, 8, True)
    metrics.observe_stats(stats({"sql": 1}, {"chat": 1}))
    metrics.observe_stats(stats({"chat": 1}, {}))
    series = lora_info(metrics)
    assert [(s["running_lora_adapters"], s["waiting_lora_adapters"]) for s, _ in series] == [
        ("", ""),  # at start-up, before any step
        ("sql", "chat"),
        ("chat", ""),
    ]
    assert all(s["max_lora"] == "1" for s, _ in series)
    metrics.observe_stats(stats({}, {}))  # idle again: the start-up series is the newest now
    assert lora_info(metrics)[-1][0]["running_lora_adapters"] == ""


def test_finished_requests_are_counted_per_adapter_and_finish_reason() -> None:
    metrics = EngineMetrics(MODEL, max_loras=2)
    done = [finished("sql"), finished("sql", "stop"), finished("sql"), finished(None)]
    metrics.observe_outputs(IterationStats(finished=done))
    counts = {
        (s["lora_name"], s["finished_reason"]): v
        for s, v in samples(metrics, "pagedock:lora_requests_total")
    }
    assert counts == {("sql", "length"): 2.0, ("sql", "stop"): 1.0}
    assert all(
        s["model_name"] == MODEL for s, _ in samples(metrics, "pagedock:lora_requests_total")
    )


@pytest.fixture(scope="module")
def lora_llm(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LLM:
    root = tmp_path_factory.mktemp("adapters")
    modules = [f"{name}={write_adapter(root / name)}" for name in ("sql", "chat")]
    args: dict[str, Any] = dict(dtype="float32", num_kv_blocks=64, max_model_len=128)
    return LLM(
        model=str(tiny_model_dir), enable_lora=True, max_loras=1, lora_modules=modules, **args
    )


def test_an_engine_serving_adapters_reports_them_as_its_requests_move(lora_llm: LLM) -> None:
    engine, metrics = lora_llm.engine, EngineMetrics(MODEL, max_loras=1)
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    for i, adapter in enumerate(("sql", "chat", None)):
        ref = None if adapter is None else AdapterRef(adapter)
        engine.add_request(f"r{i}", [5, 6, 7, 8], params, lora_request=ref)
    # One slot: "sql" runs, "chat" waits for it; the base model's request runs beside.
    while engine.has_unfinished_requests():
        metrics.observe_outputs(engine.output_processor.process(engine.step_core()).stats)
        metrics.observe_stats(engine.stats())
    series = [
        (s["running_lora_adapters"], s["waiting_lora_adapters"]) for s, _ in lora_info(metrics)
    ]
    assert series[0] == ("sql", "chat") and ("chat", "") in series and series[-1] == ("", "")
    counts = {s["lora_name"]: v for s, v in samples(metrics, "pagedock:lora_requests_total")}
    assert counts == {"sql": 1.0, "chat": 1.0}
