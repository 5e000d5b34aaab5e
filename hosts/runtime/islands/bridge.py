"""The bridge between islands: a torchft Manager in each island's leader, broadcasts inside the island.

torchft does the hard parts: its Lighthouse decides at every sync which islands are in the quorum
(an island whose heartbeats stop is dropped; one that arrives is added), the Manager reconfigures a
gloo process group over the quorum, runs the allreduce, agrees with the others whether the step
commits (every island drops a step any of them failed), and hands a joining island the live state of
a healthy one (`state_dict` / `load_state_dict` below, over its HTTP checkpoint transport).

Only the leader holds a Manager, so islands of different sizes can meet. What came across reaches
the island's other ranks by a broadcast on the island's own backend.

The leader also times what it sends: `take_gbps` is the bridge's measured bandwidth, the bits this
leader sent in each committed sync's payload allreduce over the wall time of that allreduce (the
median over the syncs since it was last asked). It is the allreduce's *effective* throughput (gloo's
ring, its copies and the links' latency included), not the raw link rate: what the planner's bridge
time (bytes per sync × 8 / Gbit/s) must be to predict a sync, which is how the planner uses it.
When the payload crossed in buckets during the backward pass, its time runs from the first bucket out
to the last byte in, which may include waits for the backward pass: a lower bound of the bandwidth.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp, TCPStore

from hosts.runtime.engine import Placement
from hosts.runtime.islands.layout import Header
from hosts.runtime.islands.overlap import GradientBuckets, reorder
from kernel.protocol import PLATFORM_URL_ENV, IslandLaunch, lighthouse_address


@dataclass(frozen=True)
class Outcome:
    """A sync as every rank of the island sees it."""

    committed: bool  # every island in the quorum finished the allreduce: apply it
    primary: bool  # this island is the quorum's first: it writes the run's checkpoints
    header: Header  # summed over the quorum (the island's own when not committed)
    payload: torch.Tensor | None  # summed over the quorum (None when not committed or none was sent)


@dataclass(frozen=True)
class InFlight:
    """A sync under way (`Bridge.start`): the leader's allreduces, what they sum into."""

    header: Header
    summed: torch.Tensor | None
    payload: torch.Tensor | None
    works: tuple | None


class Bridge:
    """An island's end of the bridge; every rank of the island makes one and calls it in step."""

    def __init__(
        self,
        island: IslandLaunch,
        placement: Placement,
        state_dict: Callable[[], dict],
        payload_size: int,
    ) -> None:
        """`state_dict`: what this island hands a joining one (called in torchft's thread while the
        trainer waits for the quorum); `payload_size`: float32 elements each sync sends across."""
        self.island, self.placement, self.payload_size = island, placement, payload_size
        self.leader = placement.rank == 0
        self.bytes_across = 0  # what this island's leader sent across, all syncs together
        self.syncs = 0  # committed syncs
        self.participants = 0  # islands in the last quorum
        self._transfers: list[tuple[int, float]] = []  # (bytes sent, seconds) per committed sync since take_gbps
        self._healed: dict | None = None
        self.crossing = None  # the last overlapped exchange's timing (overlap.Crossing)
        self._quorum_open = False  # the quorum `gather` formed is this island's first sync (it joined mid-run)
        self._state_dict = state_dict
        self.manager = self._manager() if self.leader else None

    def _manager(self):
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        timeout = timedelta(seconds=self.island.quorum_timeout_s)
        transport = _transport_at(self.island.address, timeout)
        # The island's own store for torchft (its DeepSpeed world keeps MASTER_PORT's): the other
        # islands reach it at the leader's address when their process groups are configured.
        self.store = TCPStore(self.island.address, 0, is_master=True, wait_for_workers=False)
        return Manager(
            pg=ProcessGroupGloo(timeout=timeout),
            load_state_dict=self._receive,
            state_dict=self._state_dict,
            min_replica_size=1,
            use_async_quorum=False,  # a joining island is healed before its step begins
            timeout=timeout,
            quorum_timeout=timedelta(seconds=max(self.island.quorum_timeout_s, self.island.start_timeout_s)),
            connect_timeout=timeout,
            rank=0,
            world_size=1,
            store_addr=self.island.address,
            store_port=self.store.port,
            lighthouse_addr=lighthouse_address(self.island.lighthouse, os.environ.get(PLATFORM_URL_ENV)),
            replica_id=f"island-{self.island.index}",
            hostname=self.island.address,
            init_sync=False,  # every island builds the same weights from the run's seed
            checkpoint_transport=transport,
        )

    def _receive(self, state: dict) -> None:
        """torchft's load_state_dict: a healthy island's state, for this joining one (applied by the trainer)."""
        self._healed = state

    def gather(self, expected: int) -> bool:
        """Before the first step: wait until every planned island is in the quorum, or the run is already
        going (this island joins it), or start_timeout_s passed (go on with those that came).

        Returns whether this island joined a run in progress: its first sync then belongs to the quorum
        just formed, where the others already are, and `begin` hands over the state it was healed from.
        """
        joined = False
        if self.leader:
            deadline = time.monotonic() + self.island.start_timeout_s
            while True:
                self.manager.start_quorum()
                self.participants = self.manager.num_participants()
                joined = self._healed is not None
                # A joining island waits to be healed; a starting one for its peers to arrive.
                arrived = not self.island.joining and self.participants >= expected
                if joined or arrived or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        self._quorum_open = bool(self._share_scalars([float(joined)])[0])
        return self._quorum_open

    def begin(self) -> dict | None:
        """Start a sync's quorum. Returns, on every rank of an island that has just joined, the state a
        healthy island sent it (None otherwise)."""
        healed = None
        if self.leader:
            if not self._quorum_open:
                self.manager.start_quorum()
                self.participants = self.manager.num_participants()
            healed, self._healed = self._healed, None
        self._quorum_open = False
        if self.placement.world_size > 1:
            box = [healed]
            dist.broadcast_object_list(box, src=0)
            healed = box[0]
        return healed

    def exchange(self, header: Header, payload: torch.Tensor | None, buckets: GradientBuckets | None = None) -> Outcome:
        """Sum `header` and the leader's `payload` (float32, `payload_size` elements) over the quorum.

        Only the leader's payload is read; the other ranks pass None and receive the sum. An island of one
        rank in step mode passes `buckets` instead: its payload has been crossing since its backward pass
        began (`overlap`), and `crossing` says afterwards when it did.
        """
        committed, primary, summed, total = False, False, header.pack(), None
        self.crossing = None
        if self.leader:
            committed, primary, summed, total = self._allreduce(header, payload, buckets)
        return self._outcome(header, committed, primary, summed, total)

    def _outcome(self, header: Header, committed: bool, primary: bool, summed, total) -> Outcome:
        """The leader's result on every rank of the island."""
        committed, primary = (flag > 0 for flag in self._share_scalars([float(committed), float(primary)]))
        if not committed:
            return Outcome(False, primary, header, None)
        summed = self.share(summed)
        total = self.share(total if self.leader else torch.empty(self.payload_size, dtype=torch.float32))
        return Outcome(True, primary, Header.unpack(summed), total)

    def start(self, header: Header, payload: torch.Tensor | None) -> InFlight:
        """Start what `exchange` does and return at once (diloco's overlapped sync: the islands train on
        while it crosses); `finish` waits for it. Only the leader sends; it must not touch `payload` until then."""
        if not self.leader:
            return InFlight(header, None, None, None)
        summed = header.pack()
        header_work = self.manager.allreduce(summed, reduce_op=ReduceOp.SUM)
        return InFlight(header, summed, payload, (header_work, self.manager.allreduce(payload, reduce_op=ReduceOp.SUM)))

    def finish(self, sync: InFlight, timed: bool) -> Outcome:
        """Wait for a sync `start` began; every rank of the island gets its Outcome, as from `exchange`.
        `timed`: the sync was started just now, so its transfer's time measures the bridge (one that
        crossed while the islands trained says nothing about the link)."""
        committed, primary, summed, total = False, False, sync.header.pack(), None
        if self.leader:
            committed, primary, summed, total = self._wait(sync, timed)
        return self._outcome(sync.header, committed, primary, summed, total)

    def _wait(self, sync: InFlight, timed: bool):
        """Leader: the header's allreduce ends only once every island has reached it, so the payload's
        clock, started then, counts the transfer rather than a wait for a slower island."""
        header_work, payload_work = sync.works
        header_work.wait()
        began = time.perf_counter()
        payload_work.wait()
        seconds = time.perf_counter() - began if timed else 0.0
        return self._settle(sync.summed, sync.payload, seconds)

    def start_allreduce(self, tensor: torch.Tensor):
        """Leader: start summing `tensor` in place across the quorum (torchft's Work, `wait()` for it)."""
        return self.manager.allreduce(tensor, reduce_op=ReduceOp.SUM)

    def _allreduce(self, header: Header, payload: torch.Tensor | None, buckets: GradientBuckets | None = None):
        if buckets is None:
            return self._wait(self.start(header, payload), timed=True)
        # The buckets went first, during the backward pass; the header follows them on the same process
        # group, so its end is the payload's end too.
        summed = header.pack()
        header_work = self.manager.allreduce(summed, reduce_op=ReduceOp.SUM)
        payload, self.crossing = buckets.wait()
        header_work.wait()
        return self._settle(summed, reorder(payload, buckets), self.crossing.busy_s)

    def _settle(self, summed: torch.Tensor, payload: torch.Tensor, seconds: float):
        """Leader, after a sync's allreduces: whether every island finished them, and what crossed."""
        manager = self.manager
        committed = manager.should_commit()
        participants = max(manager.num_participants(), 1)
        if committed:  # a ring allreduce sends 2(n-1)/n of the tensor from every member
            sent = int(payload.numel() * payload.element_size() * 2 * (participants - 1) / participants)
            self.bytes_across += sent
            if sent > 0 and seconds > 0:
                self._transfers.append((sent, seconds))
        self.syncs += int(committed)
        return committed, manager.participating_rank() == 0, summed, payload

    def take_gbps(self) -> float | None:
        """The measured bridge bandwidth in Gbit/s since the last call: the median over those committed
        syncs of (bits this leader sent) / (seconds its payload allreduce took). None when nothing was
        sent (not the leader, alone in the quorum, or no sync committed since)."""
        transfers, self._transfers = self._transfers, []
        if not transfers:
            return None
        gbps = statistics.median(sent * 8 / seconds / 1e9 for sent, seconds in transfers)
        return float(f"{gbps:.6g}")

    def _share_scalars(self, values: list[float]) -> list[float]:
        return self.share(torch.tensor(values, dtype=torch.float64)).tolist()

    def share(self, tensor: torch.Tensor) -> torch.Tensor:
        """The leader's `tensor` on every rank of the island (a broadcast on the island's backend)."""
        if self.placement.world_size == 1:
            return tensor
        on_device = tensor.to(self.placement.device)
        dist.broadcast(on_device, src=0)
        return on_device.cpu()

    def close(self) -> None:
        if self.manager is not None:
            self.manager.shutdown(wait=False)
            self.manager = None


def _transport_at(address: str, timeout: timedelta):
    """torchft's HTTP checkpoint transport, advertised at the island's address.

    Its own advertises `socket.gethostname()`, which on many hosts resolves to 127.0.0.1 (or to another
    network): a joining island on another host could then never fetch the live state it heals from.
    """
    from torchft.checkpointing import HTTPTransport

    class AtIslandAddress(HTTPTransport):
        def address(self) -> str:
            port = self._server.socket.getsockname()[1]
            host = f"[{address}]" if ":" in address else address
            return f"http://{host}:{port}/checkpoint/"

    return AtIslandAddress(timeout=timeout, num_chunks=0)
