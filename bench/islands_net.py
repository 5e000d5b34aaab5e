"""Network namespaces for bench/islands.py: one namespace per island, each behind a throttled veth.

    root namespace:  bridge svib<id> 10.213.<k>.1/24   (the torchft Lighthouse binds here)
                       ├─ veth svi<id>h0 ══ eth0 10.213.<k>.11 in namespace svi<id>-0   (island 0)
                       ├─ veth svi<id>h1 ══ eth0 10.213.<k>.12 in namespace svi<id>-1   (island 1)
                       └─ ...

`throttle(bits_per_s)` puts a token bucket (tc tbf) on both ends of every veth: each island's link
to the bridge carries at most that rate each way, as an island behind its own uplink would. (tbf,
not netem: this machine's kernel has no sch_netem; tbf shapes the rate, which is all the bench needs.)
The root-side veth's counters give the bytes each island sent and received.

Subnets are claimed as tests/fleet/netns.py claims them (a free 10.213.<k>.0/24, one lock file per
subnet in the same lock folder), so a bench and the fleet tests never share one. `close()` kills what
runs inside these namespaces only, and removes the veths, namespaces and the bridge, even after a failure.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SUPERNET = "10.213"
LOCK_DIR = Path("/tmp/starverse-netns-locks")  # shared with tests/fleet/netns.py
NS_INTERFACE = "eth0"
FIRST_HOST = 11
IP_TIMEOUT_S = 10
TEARDOWN_WAIT_S = 10
TBF_LATENCY = "20ms"


class NetworkUnavailable(Exception):
    """Namespaces, veths or tbf can't be made here."""


def unavailable_reason() -> str | None:
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    return None


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and done.returncode != 0:
        raise NetworkUnavailable(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return run(["ip", *(["-n", namespace] if namespace else []), *args], check=check)


def tc(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return run([*prefix, "tc", *args], check=check)


@dataclass
class Member:
    """One island's namespace: its address and the root-side end of its veth."""

    index: int
    namespace: str
    address: str
    veth: str

    def counters(self) -> tuple[int, int]:
        """(bytes the island sent, bytes it received) so far, from the root-side veth's counters."""
        stats = Path("/sys/class/net") / self.veth / "statistics"
        return int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())


class IslandNetwork:
    def __init__(self, count: int) -> None:
        self.run_id = secrets.token_hex(3)
        self.subnet, self._lock = _claim_subnet()
        self.bridge = f"svib{self.run_id}"
        self.address = str(self.subnet.network_address + 1)
        self.members: list[Member] = []
        self.rate_bits: float | None = None
        self._created: list[tuple[str, str]] = []
        try:
            self._build(count)
        except BaseException:
            self.close()
            raise

    def _build(self, count: int) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        self._created.append(("link", self.bridge))
        ip("link", "set", "dev", self.bridge, "addrgenmode", "none", check=False)
        ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for index in range(count):
            namespace, veth, peer = (
                f"svi{self.run_id}-{index}",
                f"svi{self.run_id}h{index}",
                f"svi{self.run_id}p{index}",
            )
            address = str(self.subnet.network_address + FIRST_HOST + index)
            ip("netns", "add", namespace)
            self._created.append(("netns", namespace))
            ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            self._created.append(("link", veth))
            for name in (veth, peer):
                ip("link", "set", "dev", name, "addrgenmode", "none", check=False)
            ip("link", "set", peer, "netns", namespace)
            ip("link", "set", peer, "name", NS_INTERFACE, namespace=namespace)
            ip("addr", "add", f"{address}/24", "dev", NS_INTERFACE, namespace=namespace)
            ip("link", "set", NS_INTERFACE, "up", namespace=namespace)
            ip("link", "set", "lo", "up", namespace=namespace)
            ip("link", "set", veth, "master", self.bridge, "up")
            self.members.append(Member(index, namespace, address, veth))

    def throttle(self, bits_per_s: float | None) -> None:
        """Each island's link: at most `bits_per_s` each way (tbf on both veth ends); None: unthrottled."""
        for member in self.members:
            for device, namespace in ((member.veth, None), (NS_INTERFACE, member.namespace)):
                tc("qdisc", "del", "dev", device, "root", namespace=namespace, check=False)
                if bits_per_s:
                    burst = max(64 * 1024, int(bits_per_s / 8 * 0.004))  # 4 ms at full rate
                    tc(
                        "qdisc",
                        "add",
                        "dev",
                        device,
                        "root",
                        "tbf",
                        "rate",
                        f"{int(bits_per_s)}bit",
                        "burst",
                        str(burst),
                        "latency",
                        TBF_LATENCY,
                        namespace=namespace,
                    )
        self.rate_bits = bits_per_s

    def reachable(self) -> bool:
        """Every namespace reaches the bridge address (one bounded ping each)."""
        if shutil.which("ping") is None:
            return True
        return all(
            run(
                ["ip", "netns", "exec", m.namespace, "ping", "-c", "1", "-W", "2", self.address], check=False
            ).returncode
            == 0
            for m in self.members
        )

    def counters(self) -> list[tuple[int, int]]:
        return [member.counters() for member in self.members]

    def close(self) -> None:
        for kind, name in self._created:
            if kind != "netns":
                continue
            for _ in range(3):  # only this bench's processes live in this bench's namespaces
                pids = [int(pid) for pid in ip("netns", "pids", name, check=False).stdout.split()]
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.2)
        for kind, name in reversed(self._created):
            with contextlib.suppress(Exception):
                if kind == "link":
                    ip("link", "del", name, check=False)
                else:
                    ip("netns", "del", name, check=False)
        deadline = time.monotonic() + TEARDOWN_WAIT_S
        while self._left_over() and time.monotonic() < deadline:
            time.sleep(0.2)
        self._created = []
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _left_over(self) -> set[str]:
        links = {item["ifname"] for item in json.loads(ip("-j", "link", check=False).stdout or "[]")}
        namespaces = set(ip("netns", "list", check=False).stdout.split())
        return {name for kind, name in self._created if name in (links if kind == "link" else namespaces)}

    def __enter__(self) -> IslandNetwork:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _taken_networks() -> list[ipaddress.IPv4Network]:
    taken = []
    for link in json.loads(ip("-j", "-4", "addr").stdout or "[]"):
        for info in link.get("addr_info", []):
            taken.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    for route in json.loads(ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        if route.get("dst", "default") != "default":
            taken.append(ipaddress.ip_network(route["dst"], strict=False))
    return taken


def _claim_subnet():
    taken = _taken_networks()
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for k in candidates:
        subnet = ipaddress.ip_network(f"{SUPERNET}.{k}.0/24")
        if any(subnet.overlaps(network) for network in taken):
            continue
        LOCK_DIR.mkdir(exist_ok=True)
        lock = open(LOCK_DIR / f"{SUPERNET}.{k}.lock", "w")  # noqa: SIM115 - held while the network lives
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        return subnet, lock
    raise NetworkUnavailable(f"no free /24 left in {SUPERNET}.0.0/16")
