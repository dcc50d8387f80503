"""The settings benchmarks/vllm_router_affinity.py records: ports and temp paths redacted, and
nothing else (a `--num-threads 1` once came out as `<port>`)."""

from pathlib import Path

from benchmarks.vllm_router_affinity import parse_args, settings_of


def test_only_the_port_and_the_model_folder_are_redacted(tmp_path: Path) -> None:
    args = parse_args([])
    args.model_dir, args.log_dir = tmp_path / "tiny", tmp_path / "logs"
    engine_args = settings_of(args)["engine_args"]
    assert engine_args[engine_args.index("--port") + 1] == "<port>"
    assert engine_args[engine_args.index("--model") + 1] == "<tmp>/tiny"
    assert engine_args[engine_args.index("--num-threads") + 1] == "1"
