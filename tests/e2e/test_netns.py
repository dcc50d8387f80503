"""The pod network's bridge keeps its MAC as pods come and go (root: `make e2e`): the pods' ARP
caches stay right, and a pod's last packets (its FINs) still reach the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.netns import PodNetwork, can_make_namespaces

pytestmark = pytest.mark.e2e


def test_the_bridge_keeps_its_mac_when_pods_come_and_go() -> None:
    reason = can_make_namespaces()
    if reason:
        pytest.skip(f"e2e {reason}")
    network = PodNetwork()
    address = Path(f"/sys/class/net/{network.bridge}/address")
    try:
        network.open()
        seen = {address.read_text().strip()}
        pods = [network.add_pod()[0] for _ in range(3)]
        seen.add(address.read_text().strip())
        for netns in pods:
            network.remove_pod(netns)
            seen.add(address.read_text().strip())
    finally:
        network.close()
    assert seen == {network.bridge_mac}
