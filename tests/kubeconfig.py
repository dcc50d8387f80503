"""A kubeconfig file pointing at a local Kubernetes API (the kmock emulator in the tests)."""

from __future__ import annotations

from pathlib import Path


def write_kubeconfig(path: Path, server_url: str, token: str = "test-token") -> Path:
    """A one-context kubeconfig for `server_url` with a bearer token; returns `path`."""
    server = server_url.rstrip("/")
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: test, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: test, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    return path
