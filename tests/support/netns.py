"""Hosts that share nothing but a network: Linux network namespaces on one bridge.

`bridged_hosts(n)` builds, for one test run,

    root namespace:  bridge svb<id> 10.213.<k>.1/24  (the platform binds here)
                       ├─ veth svh<id>h1 ══ eth0 10.213.<k>.11/24 in namespace sv<id>-h1
                       ├─ veth svh<id>h2 ══ eth0 10.213.<k>.12/24 in namespace sv<id>-h2
                       └─ ...

Each namespace has only `lo` and its `eth0`: a process started there reaches the bridge's address
and the other hosts, nothing else (no default route). `<k>` is a /24 that no interface address and
no route of this machine overlaps, and that no other run holds (a lock file per subnet). Names carry
a random id, so parallel runs never share an interface or a namespace. The teardown kills what runs
inside the namespaces and removes the veths, the namespaces and the bridge, even after a failure.

Bridged traffic between the namespaces needs no sysctl: the hosts and the bridge address are one
subnet, so nothing is routed (ip_forward is not involved). With br_netfilter loaded and
bridge-nf-call-iptables=1, bridged frames do pass the iptables FORWARD chain, so a host whose
firewall drops forwarded traffic (e.g. Docker sets FORWARD policy DROP) would block them; this
module changes no sysctl and no firewall rule (tests/system/multihost/test_netns.py shows whether traffic passes).
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SUPERNET = "10.213"
LOCK_DIR = Path("/tmp/starverse-netns-locks")
NS_INTERFACE = "eth0"
FIRST_HOST = 10  # host i (1-based) gets .<FIRST_HOST + i>
IP_TIMEOUT_S = 10
TEARDOWN_WAIT_S = 10
LINK_UP_WAIT_S = 5


class NetworkUnavailable(Exception):
    """This machine can't make network namespaces here (not root, no `ip`, `ip netns add` refused)."""


def ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip [-n NS] ARGS...`; a failure raises with ip's own message."""
    argv = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _ip_json(*args: str) -> list[dict]:
    return json.loads(ip("-j", *args).stdout or "[]")


@dataclass
class Host:
    """One namespace on the bridge: its address, and the root-side end of its link."""

    index: int
    namespace: str
    address: str
    veth: str  # the root namespace's end of the veth pair: down = the host's cable is cut
    processes: list[subprocess.Popen] = field(default_factory=list)

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` inside the namespace, in its own session; the teardown ends it if nobody did."""
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen(self.command(argv), **kwargs)
        self.processes.append(process)
        return process

    def run(self, argv: list[str], timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
        """Run `argv` inside the namespace to completion."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), timeout=timeout, **kwargs)

    def cut(self) -> None:
        """Pull the host's cable: its link to the bridge goes down (processes inside keep running)."""
        ip("link", "set", self.veth, "down")

    def restore(self) -> None:
        """Plug the cable back in; returns once the host's side of the link is up again (bounded).

        Neighbour entries that failed while the link was down are flushed (else the kernel answers
        "no route to host" for a while), so traffic flows again at once.
        """
        ip("link", "set", self.veth, "up")
        ip("neigh", "flush", "dev", NS_INTERFACE, namespace=self.namespace, check=False)
        ip("neigh", "flush", "to", self.address, check=False)
        deadline = time.monotonic() + LINK_UP_WAIT_S
        while time.monotonic() < deadline:
            [link] = json.loads(ip("-j", "link", "show", NS_INTERFACE, namespace=self.namespace).stdout)
            if link.get("operstate") == "UP":
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.namespace}'s {NS_INTERFACE} is not up {LINK_UP_WAIT_S}s after the link was restored")


class BridgeNetwork:
    """A bridge in the root namespace with hosts (namespaces) on it; see the module docstring."""

    def __init__(self, subnet: ipaddress.IPv4Network, run_id: str, lock) -> None:
        self.subnet, self.run_id, self._lock = subnet, run_id, lock
        self.bridge = f"svb{run_id}"
        self.address = str(subnet.network_address + 1)  # the root namespace's address on the bridge
        self.hosts: list[Host] = []
        self._created: list[tuple[str, str]] = []  # ("link" | "netns", name), in creation order

    def create_bridge(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        self._created.append(("link", self.bridge))
        _no_ipv6_link_local(self.bridge)
        ip("addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self) -> Host:
        """One more namespace on the bridge (a host joining the network)."""
        index = len(self.hosts) + 1
        namespace, veth, peer = f"sv{self.run_id}-h{index}", f"svh{self.run_id}h{index}", f"svp{self.run_id}h{index}"
        address = str(self.subnet.network_address + FIRST_HOST + index)
        _add_namespace(namespace)
        self._created.append(("netns", namespace))
        ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        self._created.append(("link", veth))
        _no_ipv6_link_local(veth)
        _no_ipv6_link_local(peer)
        ip("link", "set", peer, "netns", namespace)
        ip("link", "set", peer, "name", NS_INTERFACE, namespace=namespace)
        ip("addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", NS_INTERFACE, namespace=namespace)
        ip("link", "set", NS_INTERFACE, "up", namespace=namespace)
        ip("link", "set", "lo", "up", namespace=namespace)
        ip("link", "set", veth, "master", self.bridge, "up")
        host = Host(index, namespace, address, veth)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        """End every process in the namespaces, then remove veths, namespaces and the bridge.

        Tries everything even when a step fails; raises at the end if anything is left.
        """
        problems: list[str] = []
        for host in self.hosts:
            _end_processes(host, problems)
        for kind, name in reversed(self._created):
            with contextlib.suppress(Exception):
                if kind == "link":
                    ip("link", "del", name, check=False)
                else:
                    ip("netns", "del", name, check=False)
        deadline = time.monotonic() + TEARDOWN_WAIT_S
        left = self._left_over()
        while left and time.monotonic() < deadline:  # a namespace's links go away asynchronously
            time.sleep(0.2)
            left = self._left_over()
        if left:
            problems.append(f"still present after {TEARDOWN_WAIT_S}s: {', '.join(sorted(left))}")
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        if problems:
            raise RuntimeError("test network teardown: " + "; ".join(problems))

    def _left_over(self) -> set[str]:
        links = {item["ifname"] for item in _ip_json("link")}
        namespaces = set(ip("netns", "list").stdout.split())
        return {name for kind, name in self._created if name in (links if kind == "link" else namespaces)}


def _no_ipv6_link_local(interface: str) -> None:
    """No IPv6 link-local address (no router solicitations): traffic only on our IPv4 addresses."""
    ip("link", "set", "dev", interface, "addrgenmode", "none", check=False)


def _add_namespace(name: str) -> None:
    done = ip("netns", "add", name, check=False)
    if done.returncode != 0:
        raise NetworkUnavailable(f"`ip netns add` failed: {done.stderr.strip()}")


def _end_processes(host: Host, problems: list[str]) -> None:
    """SIGTERM what the test started there, SIGKILL whatever is still inside the namespace."""
    for process in host.processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + TEARDOWN_WAIT_S
    for process in host.processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    for _ in range(3):
        pids = [int(pid) for pid in ip("netns", "pids", host.namespace, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:  # only processes of this run live in this run's namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    else:
        problems.append(f"processes still running in {host.namespace}")
    for process in host.processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network an interface address or a route of the root namespace covers."""
    taken = []
    for link in _ip_json("-4", "addr"):
        for info in link.get("addr_info", []):
            taken.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    for route in _ip_json("-4", "route", "show", "table", "all"):
        destination = route.get("dst", "default")
        if destination != "default":
            taken.append(ipaddress.ip_network(destination, strict=False))
    return taken


def _claim_subnet():
    """A free 10.213.<k>.0/24 and the open lock file that keeps other runs off it."""
    taken = _taken_networks()
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for k in candidates:
        subnet = ipaddress.ip_network(f"{SUPERNET}.{k}.0/24")
        if any(subnet.overlaps(network) for network in taken):
            continue
        LOCK_DIR.mkdir(exist_ok=True)
        lock = open(LOCK_DIR / f"{SUPERNET}.{k}.lock", "w")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        return subnet, lock
    raise RuntimeError(f"no free /24 left in {SUPERNET}.0.0/16 on this machine")


def unavailable_reason() -> str | None:
    """Why namespaces can't be made here, or None."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


@contextlib.contextmanager
def bridged_hosts(count: int) -> Iterator[BridgeNetwork]:
    """A bridge and `count` hosts on it; skips the test when namespaces can't be made here."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    subnet, lock = _claim_subnet()
    network = BridgeNetwork(subnet, secrets.token_hex(3), lock)
    try:
        network.create_bridge()
        for _ in range(count):
            network.add_host()
    except NetworkUnavailable as exc:
        network.close()
        pytest.skip(str(exc))
    except BaseException:
        network.close()
        raise
    try:
        yield network
    except BaseException as exc:
        try:
            network.close()
        except RuntimeError as problem:  # don't hide the test's own failure behind the teardown's
            exc.add_note(str(problem))
        raise
    network.close()
