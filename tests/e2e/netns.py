"""The e2e's pod network: one Linux bridge on the host, one network namespace per pod joined to
it by a veth pair, each with its own IP in a /24; the host side of the bridge holds `.1`, where
the API server listens. Names are unique per run so parallel runs and leftovers never collide.

    host: bridge pdbr<id> 10.<a>.<b>.1/24, MAC 02:70:64:<id>:01 (fixed)
            ├── veth pdv<id><n> ──── netns pd<id>-<n>: eth0 10.<a>.<b>.<n+1>/24, lo
            └── ...
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from pathlib import Path

IP = "/usr/bin/ip" if Path("/usr/bin/ip").exists() else "ip"
NETNS_ETC = Path("/etc/netns")


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *args], check=check, capture_output=True, text=True)


def can_make_namespaces() -> str | None:
    """None when this process may create network namespaces, else why not."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, bridge, mount)"
    if shutil.which(IP) is None:
        return "needs iproute2 (`ip`)"
    return None


class PodNetwork:
    """The bridge and the pods' namespaces; `close()` removes everything it made."""

    def __init__(self) -> None:
        self.run_id = secrets.token_hex(2)
        octet = int(self.run_id, 16) % 250 + 1
        self.subnet = ipaddress.ip_network(f"10.{200 + octet % 50}.{octet}.0/24")
        self.bridge = f"pdbr{self.run_id}"
        self.bridge_mac = f"02:70:64:{self.run_id[:2]}:{self.run_id[2:]}:01"  # locally administered
        self.host_ip = str(self.subnet.network_address + 1)
        self._next_host = 2
        self.namespaces: dict[str, str] = {}  # netns name -> pod IP

    def open(self) -> None:
        # NOTE: a bridge without an address of its own takes the lowest of its ports' MACs, and
        # takes another when that port goes: every pod then still sends to the host at the MAC it
        # cached (ARP), which nothing answers any more, until its neighbour entry is probed again
        # (seconds). A pod's last packets, the FIN of its watches among them, were lost that way
        # when another pod was removed just before, and the API server waited for requests whose
        # client was gone (up to 2 x 60 s at its shutdown). An address set once never changes.
        run_ip("link", "add", "name", self.bridge, "address", self.bridge_mac, "type", "bridge")
        run_ip("addr", "add", f"{self.host_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        run_ip("link", "set", self.bridge, "up")

    def add_pod(self) -> tuple[str, str]:
        """A new namespace on the bridge: (netns name, pod IP)."""
        index = self._next_host
        self._next_host += 1
        netns, veth = f"pd{self.run_id}-{index}", f"pdv{self.run_id}{index}"
        pod_ip = str(self.subnet.network_address + index)
        run_ip("netns", "add", netns)
        self.namespaces[netns] = pod_ip
        run_ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        run_ip("link", "set", veth, "master", self.bridge, "up")
        run_ip("-n", netns, "addr", "add", f"{pod_ip}/{self.subnet.prefixlen}", "dev", "eth0")
        run_ip("-n", netns, "link", "set", "eth0", "up")
        run_ip("-n", netns, "link", "set", "lo", "up")
        run_ip("-n", netns, "route", "add", "default", "via", self.host_ip)
        return netns, pod_ip

    def write_hosts(self, netns: str, lines: list[str]) -> None:
        """/etc/hosts inside `netns` (`ip netns exec` bind-mounts /etc/netns/NS/hosts over it).
        Written in place: a running pod's bind mount keeps seeing the same inode."""
        folder = NETNS_ETC / netns
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "hosts", "w") as f:
            f.write("\n".join(["127.0.0.1 localhost", *lines]) + "\n")

    def remove_pod(self, netns: str) -> None:
        # NOTE: deleting the namespace deletes its end of the veth, and with it the host end.
        run_ip("netns", "del", netns, check=False)
        shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)
        self.namespaces.pop(netns, None)

    def close(self) -> None:
        for netns in list(self.namespaces):
            self.remove_pod(netns)
        run_ip("link", "del", self.bridge, check=False)
