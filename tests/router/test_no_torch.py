"""The router imports, parses its flags and builds its app without torch (its image is slim)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None

sys.meta_path.insert(0, NoTorch())

from pagedock.cli import main
from router.server.app import build_app
from router.server.cli import build_parser
from router.config import RouterConfig
from router.server.context import RouterContext
from router.replicas.discovery.kubernetes import KubernetesDiscovery
from router.kv.prompt_hasher import PromptHasher

build_parser().parse_args(["--replica", "http://127.0.0.1:1"])
config = RouterConfig(replicas=["http://127.0.0.1:1"], model=None)
app = build_app(RouterContext.from_config(config))
try:
    main(["route", "--help"])
except SystemExit as e:
    assert e.code == 0
assert "torch" not in sys.modules
print("router ok without torch")
"""


def test_the_router_runs_with_torch_blocked() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "router ok without torch" in result.stdout
