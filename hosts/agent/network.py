"""Which local interface carries this node's address, so its ranks listen where peers reach them.

torch.distributed's gloo (and NCCL's bootstrap) pick the address to listen on from the hostname
unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name an interface. The hostname often resolves to
127.0.0.1 (Debian's /etc/hosts) or to another network's address, and then ranks on other hosts
can't connect. The node's address is the one the platform recorded (declared by the agent, or
the address the platform sees its requests come from); its interface is the one holding it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping

import psutil

log = logging.getLogger(__name__)

SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def interface_holding(address: str, interfaces: Mapping[str, list] | None = None) -> str | None:
    """The name of the local interface with `address` (an IP, or a DNS name resolved here), or None."""
    wanted = _addresses_of(address)
    if not wanted:
        return None
    interfaces = psutil.net_if_addrs() if interfaces is None else interfaces
    for name, addresses in interfaces.items():
        for entry in addresses:
            if entry.family in (socket.AF_INET, socket.AF_INET6) and _ip(entry.address) in wanted:
                return name
    return None


def socket_ifname_env(address: str, interfaces: Mapping[str, list] | None = None) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME for the interface holding `address`; {} if none does."""
    name = interface_holding(address, interfaces) if address else None
    return dict.fromkeys(SOCKET_IFNAME_VARIABLES, name) if name else {}


def _addresses_of(address: str) -> set:
    parsed = _ip(address)
    if parsed is not None:
        return {parsed}
    try:
        infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return set()
    return {ip for ip in (_ip(info[4][0]) for info in infos) if ip is not None}


def _ip(text: str):
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 link-local address has a zone
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


class NodeAddress:
    """The address the platform recorded for this node, and the rank environment that follows from it.

    Says once per address when no local interface holds it (the platform sees the host through
    NAT or a proxy): the ranks then listen where the hostname resolves, and `--address` fixes it.
    """

    def __init__(self, address: str = "") -> None:
        self.address = address
        self._warned: str | None = None

    def update(self, address: str | None) -> None:
        if address and address != self.address:
            if self.address:
                log.info("the platform now sees this node at %s (was %s)", address, self.address)
            self.address = address

    def rank_env(self) -> dict[str, str]:
        env = socket_ifname_env(self.address)
        if self.address and not env and self._warned != self.address:
            self._warned = self.address
            log.warning(
                "no local interface holds this node's address %s (NAT or a proxy between this host and the "
                "platform?): ranks on other hosts may not reach this one; pass --address with this host's "
                "address on the network the nodes share",
                self.address,
            )
        return env
