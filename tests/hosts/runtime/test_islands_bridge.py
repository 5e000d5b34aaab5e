"""The bridge's small parts: where a healthy island tells a joining one to fetch its state from, and the
bandwidth a leader measures across the bridge (its payload allreduce's bits over its wall time)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from hosts.runtime.engine import Placement
from hosts.runtime.islands.bridge import Bridge, _transport_at
from hosts.runtime.islands.layout import Header
from hosts.runtime.local import Lighthouse, LocalJob, island_launches
from kernel.protocol import IslandLaunch
from tests.support.ranks import TINY


def test_the_checkpoint_transport_is_advertised_at_the_islands_address_not_the_hostname():
    # torchft's own transport names socket.gethostname(), often 127.0.0.1: unreachable from other hosts.
    for address, expected in (("10.1.2.3", "http://10.1.2.3:"), ("fd00::7", "http://[fd00::7]:")):
        transport = _transport_at(address, timedelta(seconds=5))
        try:
            assert transport.address().startswith(expected) and transport.address().endswith("/checkpoint/")
        finally:
            transport.shutdown(wait=False)


class _Work:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def wait(self) -> None:
        time.sleep(self.seconds)


class _Manager:
    """torchft's Manager as `_allreduce` uses it: the payload's allreduce takes `seconds`."""

    def __init__(self, participants: int, seconds: float, commit: bool = True) -> None:
        self.participants, self.seconds, self.commit = participants, seconds, commit

    def allreduce(self, tensor: torch.Tensor, reduce_op) -> _Work:
        return _Work(0.0 if tensor.dtype == torch.float64 else self.seconds)  # the header is float64

    def should_commit(self) -> bool:
        return self.commit

    def num_participants(self) -> int:
        return self.participants

    def participating_rank(self) -> int:
        return 0


def _leader(manager: _Manager, size: int) -> Bridge:
    island = IslandLaunch(index=0, batches={"0": 1}, lighthouse=":1", address="127.0.0.1")
    bridge = Bridge(island, Placement(1, 2, torch.device("cpu")), dict, payload_size=size)  # rank 1: no Manager
    bridge.leader, bridge.manager = True, manager
    return bridge


HEADER = Header(1.0, 0.0, 0.0, False, False, False, {0: 1})


def test_the_leader_measures_the_bridge_as_bits_sent_over_the_allreduces_time():
    size = 1_000_000
    bridge = _leader(_Manager(participants=3, seconds=0.05), size)
    assert bridge.take_gbps() is None  # nothing sent yet
    for _ in range(3):
        bridge._allreduce(HEADER, torch.zeros(size))
    sent = int(4 * size * 2 * 2 / 3)  # a ring of three: 2(n-1)/n of the float32 payload
    assert bridge.bytes_across == 3 * sent
    gbps = bridge.take_gbps()
    ceiling = sent * 8 / 0.05 / 1e9  # the clock ran at least the allreduce's 50 ms
    assert 0.2 * ceiling < gbps <= ceiling
    assert bridge.take_gbps() is None  # each figure covers the syncs since the last one


def test_no_figure_when_nothing_crossed():
    alone = _leader(_Manager(participants=1, seconds=0.01), 1000)
    alone._allreduce(HEADER, torch.zeros(1000))
    failed = _leader(_Manager(participants=2, seconds=0.01, commit=False), 1000)
    failed._allreduce(HEADER, torch.zeros(1000))
    assert alone.take_gbps() is None and failed.take_gbps() is None


@pytest.mark.slow
def test_a_real_sync_reports_a_positive_measured_bridge(tmp_path: Path):
    """Two one-rank islands, three steps in step mode under a real Lighthouse: each leader's last island
    event carries the bridge it measured."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fields = {"model": TINY, "max_steps": 3, "zero_stage": 0, "checkpoint_every": 0}
    with Lighthouse(tmp_path / "lighthouse") as lighthouse:
        launches = island_launches(
            [[1], [1]], run_dir, lighthouse.address, checkpoint_dir=str(tmp_path / "checkpoints"), **fields
        )
        job = LocalJob(launches, tmp_path / "ranks").start()
        assert job.wait(240) == [0, 0], job.stderr_tail()
    for index in (0, 1):
        last = [event for event in job.events(index) if event["event"] == "island"][-1]
        assert last["syncs"] == 3 and last["bridge_gbps"] > 0
