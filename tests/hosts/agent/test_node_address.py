"""The agent learns its address from the platform and makes its ranks listen on the interface holding it."""

from __future__ import annotations

import json
import logging
import socket
from types import SimpleNamespace

import pytest

from hosts.agent import network
from hosts.agent.cli import build_parser, config_from
from hosts.agent.commands import launch_from_dict
from hosts.agent.network import interface_holding, socket_ifname_env
from hosts.agent.ranks import rank_env
from kernel.protocol import ReportKind
from tests.support.agents import launch, wait_for


def nic(address: str, family=socket.AF_INET):
    return SimpleNamespace(family=family, address=address)


INTERFACES = {
    "lo": [nic("127.0.0.1"), nic("::1", socket.AF_INET6)],
    "ens5": [nic("52:54:00:12:34:56", getattr(socket, "AF_PACKET", 17)), nic("10.9.8.7")],
    "ib0": [nic("fe80::2%ib0", socket.AF_INET6), nic("fd00::7", socket.AF_INET6)],
}


@pytest.fixture(autouse=True)
def no_inherited_socket_variables(monkeypatch):
    for name in network.SOCKET_IFNAME_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def interfaces(monkeypatch):
    """This host's interfaces, as psutil would list them."""
    monkeypatch.setattr(network.psutil, "net_if_addrs", lambda: INTERFACES)
    return INTERFACES


def socket_env_of_rank(config, job_id: int, rank: int = 0) -> dict:
    return json.loads(
        (config.data_dir / "runs" / f"job-{job_id}-epoch-1" / f"rank-{rank}" / "socket_env.json").read_text()
    )


def test_the_interface_holding_an_address_is_found_by_ip_or_name(interfaces):
    assert interface_holding("10.9.8.7", interfaces) == "ens5"
    assert interface_holding("fd00::7", interfaces) == "ib0"
    assert interface_holding("fe80::2", interfaces) == "ib0"  # psutil writes a link-local address with its zone
    assert interface_holding("::ffff:10.9.8.7", interfaces) == "ens5"
    assert interface_holding("localhost", {"lo": [nic("127.0.0.1")]}) == "lo"
    assert interface_holding("192.0.2.200", interfaces) is None  # seen through NAT: not ours
    assert interface_holding("no-such-host.invalid", interfaces) is None


def test_ranks_get_both_socket_interface_variables_and_the_operators_own_setting_wins(interfaces):
    assert socket_ifname_env("10.9.8.7") == {"GLOO_SOCKET_IFNAME": "ens5", "NCCL_SOCKET_IFNAME": "ens5"}
    assert socket_ifname_env("") == {} and socket_ifname_env("192.0.2.200") == {}
    rank = launch_from_dict(launch())
    ours = socket_ifname_env("10.9.8.7")
    assert rank_env(rank, 0, base={}, network=ours)["GLOO_SOCKET_IFNAME"] == "ens5"
    pinned = rank_env(rank, 0, base={"GLOO_SOCKET_IFNAME": "bond0"}, network=ours)
    assert (pinned["GLOO_SOCKET_IFNAME"], pinned["NCCL_SOCKET_IFNAME"]) == ("bond0", "ens5")


def test_the_loopback_address_of_a_single_host_platform_is_on_lo():
    # Real interfaces: every Linux host has lo with 127.0.0.1.
    assert socket_ifname_env("127.0.0.1")["GLOO_SOCKET_IFNAME"] == interface_holding("127.0.0.1")


def test_the_address_defaults_to_auto_and_can_be_declared():
    parser = build_parser()
    assert config_from(parser.parse_args(["--platform", "http://p"])).address == "auto"
    assert config_from(parser.parse_args(["--platform", "http://p", "--address", "10.0.0.4"])).address == "10.0.0.4"


def test_an_auto_agent_declares_no_address_and_its_ranks_listen_where_the_platform_sees_it(
    platform, start_agent, agent_config, interfaces
):
    platform.seen_address = "10.9.8.7"
    running = start_agent()
    wait_for(lambda: platform.polls, what="first poll")
    platform.send("start", 1, 1, {"ranks": [launch(job_id=1)]})
    wait_for(lambda: platform.items(ReportKind.EXIT, job_id=1), what="the rank's exit")
    running.stop()

    assert platform.enrollments[0]["address"] == ""
    assert socket_env_of_rank(agent_config, 1) == {"GLOO_SOCKET_IFNAME": "ens5", "NCCL_SOCKET_IFNAME": "ens5"}


def test_a_new_address_seen_at_a_poll_moves_the_next_ranks_to_its_interface(
    platform, start_agent, agent_config, interfaces
):
    running = start_agent()
    wait_for(lambda: platform.polls, what="first poll")
    platform.send("start", 1, 1, {"ranks": [launch(job_id=1)]})
    wait_for(lambda: platform.items(ReportKind.EXIT, job_id=1), what="the first rank's exit")
    platform.seen_address = "10.9.8.7"  # the host moved (DHCP, another network)
    polls = len(platform.polls)
    wait_for(lambda: len(platform.polls) > polls + 1, what="a poll that says the new address")
    platform.send("start", 2, 1, {"ranks": [launch(job_id=2)]})
    wait_for(lambda: platform.items(ReportKind.EXIT, job_id=2), what="the second rank's exit")
    running.stop()

    assert socket_env_of_rank(agent_config, 1)["GLOO_SOCKET_IFNAME"] == "lo"  # it enrolled over loopback
    assert socket_env_of_rank(agent_config, 2)["GLOO_SOCKET_IFNAME"] == "ens5"


def test_an_address_no_interface_holds_leaves_the_ranks_alone_and_says_so_once(
    platform, start_agent, agent_config, interfaces, caplog
):
    platform.seen_address = "192.0.2.200"  # NAT between this host and the platform
    running = start_agent()
    wait_for(lambda: platform.polls, what="first poll")
    with caplog.at_level(logging.WARNING, logger="hosts.agent.network"):
        platform.send("start", 1, 1, {"ranks": [launch(job_id=1)]})
        platform.send("start", 2, 1, {"ranks": [launch(job_id=2)]})
        wait_for(lambda: platform.items(ReportKind.EXIT, job_id=2), what="the ranks' exits")
    running.stop()

    assert socket_env_of_rank(agent_config, 1) == {"GLOO_SOCKET_IFNAME": None, "NCCL_SOCKET_IFNAME": None}
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "192.0.2.200" in r.getMessage()
    ]
    assert len(warnings) == 1 and "--address" in warnings[0]


def test_a_declared_address_is_sent_and_its_interface_used(platform, start_agent, agent_config, interfaces):
    running = start_agent(address="10.9.8.7")
    wait_for(lambda: platform.polls, what="first poll")
    platform.send("start", 1, 1, {"ranks": [launch(job_id=1)]})
    wait_for(lambda: platform.items(ReportKind.EXIT, job_id=1), what="the rank's exit")
    running.stop()

    assert platform.enrollments[0]["address"] == "10.9.8.7"
    assert socket_env_of_rank(agent_config, 1)["GLOO_SOCKET_IFNAME"] == "ens5"
