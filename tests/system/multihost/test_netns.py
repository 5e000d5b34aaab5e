"""The test network itself: hosts reach each other and the bridge, nothing else; a cut link cuts; the
teardown leaves nothing behind, even when the test fails."""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest

from tests.support import netns
from tests.support.netns import bridged_hosts

# Listens on ADDRESS:PORT, prints "listening", answers one connection with "hello".
SERVE = (
    "import socket, sys\n"
    "server = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
    "server.settimeout(10)\n"
    "print('listening', flush=True)\n"
    "connection, _ = server.accept()\n"
    "connection.sendall(b'hello')\n"
    "connection.close()\n"
)
# Connects to ADDRESS:PORT within 2 s and prints what it got, or the error's name.
CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2) as s:\n"
    "        print(s.recv(16).decode())\n"
    "except OSError as exc:\n"
    "    print(type(exc).__name__)\n"
)
PORT = 47111


def serve(host, address: str) -> subprocess.Popen:
    """A one-shot TCP server inside `host` (None: the root namespace), ready when this returns."""
    argv = [sys.executable, "-c", SERVE, address, str(PORT)]
    process = (host.popen if host else subprocess.Popen)(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "listening"
    return process


def connect(host, address: str) -> str:
    argv = [sys.executable, "-c", CONNECT, address, str(PORT)]
    if host is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    return host.run(argv, timeout=20).stdout.strip()


def test_hosts_reach_each_other_and_the_bridge_but_nothing_else():
    with bridged_hosts(2) as network:
        one, two = network.hosts
        assert network.address.startswith("10.213.") and network.address.endswith(".1")
        assert (one.address, two.address) == (
            network.address.rsplit(".", 1)[0] + ".11",
            network.address.rsplit(".", 1)[0] + ".12",
        )

        listener = serve(two, two.address)
        assert connect(one, two.address) == "hello"
        listener.wait(10)
        listener = serve(None, network.address)
        assert connect(one, network.address) == "hello"
        listener.wait(10)
        listener = serve(one, one.address)
        assert connect(None, one.address) == "hello"
        listener.wait(10)

        # A host's loopback is its own: the root namespace's 127.0.0.1 is not reachable from it.
        root_loopback = serve(None, "127.0.0.1")
        assert connect(one, "127.0.0.1") == "ConnectionRefusedError"
        root_loopback.kill()
        root_loopback.wait(10)
        routes = one.run(["ip", "-4", "route"]).stdout
        assert "default" not in routes and str(network.subnet) in routes
        interfaces = one.run(["ip", "-br", "link"]).stdout.split("\n")
        assert sorted(line.split()[0].split("@")[0] for line in interfaces if line) == ["eth0", "lo"]


def test_a_cut_link_drops_the_host_until_it_is_restored():
    with bridged_hosts(2) as network:
        one, two = network.hosts
        listener = serve(None, network.address)
        one.cut()
        assert connect(one, network.address) != "hello"
        assert connect(two, network.address) == "hello"  # the others keep their link
        listener.wait(10)

        one.restore()
        listener = serve(None, network.address)
        assert connect(one, network.address) == "hello"
        listener.wait(10)


def test_the_teardown_removes_everything_even_when_the_test_fails():
    with pytest.raises(ZeroDivisionError), bridged_hosts(2) as network:
        sleeper = network.hosts[0].popen(["sleep", "600"])
        names = [network.bridge, *(h.veth for h in network.hosts)]
        namespaces = [h.namespace for h in network.hosts]
        1 / 0  # noqa: B018 - the test body fails

    assert sleeper.poll() is not None
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True).stdout
    assert not [name for name in names if name in links]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [name for name in namespaces if name in listed]
    addresses = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    assert str(network.address) not in addresses


def test_names_are_unique_per_run_and_fit_the_kernels_interface_name_limit():
    with bridged_hosts(1) as first, bridged_hosts(1) as second:
        assert first.bridge != second.bridge and first.subnet != second.subnet
        for network in (first, second):
            for name in (network.bridge, *(h.veth for h in network.hosts)):
                assert len(name) <= 15, name


def test_without_root_the_test_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="need root"), bridged_hosts(1):
        pass


def test_a_subnet_that_an_address_or_route_of_this_machine_covers_is_never_chosen(monkeypatch):
    real = netns._taken_networks()
    covered = [ipaddress.ip_network(f"10.213.{k}.0/24") for k in range(1, 255) if k != 200]
    monkeypatch.setattr(netns, "_taken_networks", lambda: [*real, ipaddress.ip_network("10.213.0.0/25"), *covered])
    with bridged_hosts(1) as network:
        assert str(network.subnet) == "10.213.200.0/24"
        assert not [n for n in real if n.overlaps(network.subnet)]
