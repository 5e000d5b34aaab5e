"""The bridge's small parts: where a healthy island tells a joining one to fetch its state from."""

from __future__ import annotations

from datetime import timedelta

from hosts.runtime.islands.bridge import _transport_at


def test_the_checkpoint_transport_is_advertised_at_the_islands_address_not_the_hostname():
    # torchft's own transport names socket.gethostname(), often 127.0.0.1: unreachable from other hosts.
    for address, expected in (("10.1.2.3", "http://10.1.2.3:"), ("fd00::7", "http://[fd00::7]:")):
        transport = _transport_at(address, timedelta(seconds=5))
        try:
            assert transport.address().startswith(expected) and transport.address().endswith("/checkpoint/")
        finally:
            transport.shutdown(wait=False)
