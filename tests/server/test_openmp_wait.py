"""`pagedock serve` makes OpenMP's threads spin between parallel regions, unless told otherwise."""

from __future__ import annotations

import os

import pytest

from engine.server import cli
from engine.server.openmp_wait import WAIT_SETTINGS, default_wait_policy


def test_the_active_wait_is_set_where_nothing_says_how_openmp_waits() -> None:
    environ = {"PATH": "/usr/bin"}
    assert default_wait_policy(environ)
    assert environ == {"PATH": "/usr/bin", "OMP_WAIT_POLICY": "ACTIVE"}


@pytest.mark.parametrize("name", WAIT_SETTINGS)
def test_a_users_wait_setting_is_kept(name: str) -> None:
    environ = {name: "PASSIVE" if name == "OMP_WAIT_POLICY" else "0"}
    before = dict(environ)
    assert not default_wait_policy(environ)
    assert environ == before


def test_serve_sets_it_before_the_server_loads_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in WAIT_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    seen = []

    def run_server(config: object, options: object) -> int:
        seen.append(os.environ.get("OMP_WAIT_POLICY"))
        return 0

    import engine.server.serve as serve

    monkeypatch.setattr(serve, "run_server", run_server)
    try:
        assert cli.main(["--model", "smollm2-135m-instruct"]) == 0
    finally:
        os.environ.pop("OMP_WAIT_POLICY", None)  # monkeypatch restores a value set before
    assert seen == ["ACTIVE"]
