"""The step loop of a rank in an island, in `step` or `diloco` mode.

`step`: every step each island computes its gradient inside its own world (the mean over its tokens),
the leaders sum gradient × tokens across the bridge, and every island applies the same global mean
gradient: the update of one flat world on the same batches. `diloco`: each island takes H steps on
its own; then the leaders sum (global parameters − the island's) × the island's tokens, and an outer
Nesterov SGD step on the token-weighted mean delta gives the new global parameters (DiLoCo). Traffic
falls H times; the optimisation is close to, not equal to, one world's.

Membership changes only at a sync. An island that joins is healed first (a healthy island sends it
the parameters, optimizer state where it can, and the data position), then takes part like the others.
An island that leaves costs the others one dropped sync at most: its allreduce fails, every island
drops that step (torchft's should_commit) and the next quorum goes on without it.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import torch

from hosts.runtime.checkpoint import TrainState
from hosts.runtime.control import Request
from hosts.runtime.data import shard
from hosts.runtime.islands import layout, tensors
from hosts.runtime.islands.bridge import Bridge, InFlight, Outcome
from hosts.runtime.islands.layout import Header
from hosts.runtime.islands.overlap import GradientBuckets
from hosts.runtime.train import Trainer, finish_boundary, forward_backward, start_boundary
from kernel.protocol import SYNC_DILOCO, IslandLaunch

FIGURES_EVERY = 10  # step mode syncs every step: its figures are reported every this many steps
SYNC_RETRIES = 3  # diloco: times a failed outer sync is tried again (with a new quorum) before it is given up


@dataclass(frozen=True)
class Round:
    """A diloco round as the island sent it: what it said, and (leader) its weights and tokens."""

    header: Header
    request: Request
    start: torch.Tensor | None  # the weights the island began the round with
    reached: torch.Tensor | None  # those it reached by the boundary
    tokens: int
    step: int  # the step it was sent at: what the islands trained up to is in it
    base: torch.Tensor | None = None  # the weights the island trains on from after sending it
    sync: InFlight | None = None


class IslandTrainer(Trainer):
    """A Trainer whose steps meet the other islands' across the bridge."""

    def __init__(self, *args, island: IslandLaunch, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.island = island
        self.diloco = island.mode == SYNC_DILOCO
        self.every = max(1, int(island.sync_every)) if self.diloco else 1
        self.batch = sum(self.launch.micro_batches)  # this island's samples per step
        self.members = island.planned  # {island: batch} as the last sync saw them
        self.members.setdefault(island.index, self.batch)
        self.primary = island.index == min(self.members)
        self.since_sync, self.tokens_since_sync = 0, 0
        self.global_params: torch.Tensor | None = None  # diloco, leader: the parameters of the last sync
        self.start: torch.Tensor | None = None  # diloco, leader: the weights the island began this round with
        self.outer: torch.optim.Optimizer | None = None
        self.in_flight: Round | None = None  # diloco, overlapped: the round crossing while the island trains
        self.landing_now = True  # this boundary's round lands before training goes on (told to a joiner)
        size = sum(param.numel() for param in tensors.trainable(self.engine))
        self.bridge = Bridge(island, self.placement, self.snapshot, payload_size=size)
        # Step mode's gradient crosses in buckets (the leader's); an island of one rank at ZeRO 0 starts
        # them during its backward pass (`overlap`).
        self.overlapping = not self.diloco and self.placement.world_size == 1 and self.launch.zero_stage == 0
        self.buckets: GradientBuckets | None = None
        if not self.diloco and self.bridge.leader:
            self.buckets = GradientBuckets(
                tensors.trainable(self.engine), self.bridge.start_allreduce, hooks=self.overlapping
            )
        if self.diloco and self.bridge.leader:
            self._start_outer(tensors.params(self.engine))

    def _start_outer(self, params: torch.Tensor) -> None:
        self.global_params = torch.nn.Parameter(params.clone())
        self.start = params.clone()  # the weights this round began with
        momentum = float(self.island.outer_momentum)
        self.outer = torch.optim.SGD(
            [self.global_params], lr=float(self.island.outer_lr), momentum=momentum, nesterov=momentum > 0
        )

    def run(self) -> TrainState:
        try:
            joined = self.bridge.gather(len(self.island.planned))
            if self.island.joining and not joined:  # never train a run's steps alone from scratch
                self._log(f"island {self.island.index}: no island took it in (the run ended?): nothing to train")
                self.events.done(self.state.step, None, path=None, stopped=True, eval_loss=None)
                return self.state
            self._log(f"island {self.island.index} ({self.island.stack}, {self.island.mode}): {self._arrival(joined)}")
            if joined and self.diloco:  # the others are at a sync: meet them there with a zero delta
                self._outer_sync(self._prepare(Request()), Request())
            return super().run()
        finally:
            if self.buckets is not None:
                self.buckets.remove()
            self.bridge.close()

    def _arrival(self, joined: bool) -> str:
        if joined:
            return "joining a run in progress"
        return f"{self.bridge.participants if self.bridge.leader else 'all'} island(s) in at the start"

    # What a joining island gets from this one (torchft calls it in its own thread while the
    # leader waits for the quorum, so nothing moves meanwhile).
    def snapshot(self) -> dict:
        train = {
            "step": self.state.step,
            "samples_seen": self.state.samples_seen,
            "members": self.members,
            "landing_now": self.landing_now,
        }
        if self.diloco:
            return {
                "train": train,
                "params": self.global_params.detach().clone(),
                "outer": copy.deepcopy(self.outer.state_dict()),
            }
        optimizer = self.engine.optimizer
        whole = self.launch.zero_stage == 0 and not self.placement.cuda  # the leader holds all of it
        return {
            "train": train,
            "params": tensors.params(self.engine).clone(),
            "optimizer": copy.deepcopy(optimizer.state_dict()) if whole else None,
        }

    def heal(self, state: dict) -> None:
        """Take a healthy island's state (every rank of this island, after the leader received it)."""
        tensors.set_params(self.engine, state["params"])
        if state.get("optimizer") is not None:
            self.engine.optimizer.load_state_dict(state["optimizer"])
        train = state["train"]
        self.members = {int(island): int(batch) for island, batch in train["members"].items()}
        self.members[self.island.index] = self.batch
        self.state = TrainState(train["step"], train["samples_seen"], self.state.loss, self.state.eval_loss)
        self.since_sync, self.tokens_since_sync = 0, 0
        self.landing_now = bool(train.get("landing_now", True))  # as the others do with this round
        if self.diloco and self.bridge.leader:
            self._start_outer(state["params"])
            self.outer.load_state_dict(state["outer"])
        self._event("joined")
        self._log(f"island {self.island.index} joined at step {self.state.step}, healed from a healthy island")

    def step(self) -> Request:
        started = time.perf_counter()  # a step's time includes its quorum and what crosses the bridge
        if not self.diloco:
            healed = self.bridge.begin()
            if healed is not None:
                self.heal(healed)
                started = time.perf_counter()  # the heal is the join's cost, not this step's
        self.set_rate()
        first = layout.first_sample(self.state.samples_seen, self.members, self.island.index)
        loss_tokens = self.corpus.loss_tokens(first, self.batch)
        if self.overlapping:
            self.buckets.arm(weight=loss_tokens)  # the gradient starts across as the backward pass makes it
        loss_sum, request = self._forward_backward(first, loss_tokens)
        tokens = self.launch.micro_batches[self.placement.rank] * self.spec.seq_len
        if self.diloco:
            return self._inner_step(started, tokens, loss_sum, loss_tokens, request)
        header = self._header(loss_tokens, loss_sum, loss_tokens, request)
        if self.overlapping:
            self.buckets.flush()
        else:
            grads = tensors.full_grads(self.engine)  # a collective inside the island at ZeRO 1-2
            computed = time.perf_counter()
            if self.bridge.leader:
                self.buckets.send(grads, weight=loss_tokens)
        outcome = self.bridge.exchange(header, None, buckets=self.buckets)
        if self.overlapping:
            crossing = self.bridge.crossing
            exposed = crossing.exposed(started, self.pacer.modelled_seconds(tokens)) if crossing else 0.0
        else:
            exposed = time.perf_counter() - computed  # the whole exchange comes after the compute
        if not outcome.committed:  # an island left mid-sync: drop the step, its samples come again
            self.engine.zero_grad()
            self._report_dropped(started)
            return request
        tensors.set_full_grads(self.engine, outcome.payload / max(outcome.header.weight, 1.0))
        self.engine.step()
        # The chip's modelled time covers its compute and its optimizer step, as in one world; what of the
        # bridge it could not hide comes on top of it.
        self.pacer.wait(started + exposed, tokens)
        return self._advance(outcome, started, tokens, outcome.header.loss)

    def _forward_backward(self, first: int, loss_tokens: int) -> tuple[float, Request]:
        """This island's part of the step: its batch from `first`, gradients reduced inside the island."""
        rank_first, count = shard(first, self.launch.micro_batches, self.placement.rank)
        ids, mask = self.corpus.batch(rank_first, count)
        batch = (ids.to(self.placement.device), mask.to(self.placement.device))
        loss_sum = forward_backward(self.engine, batch, self.placement.world_size, loss_tokens)
        pending = start_boundary(loss_sum, self.control.poll() if self.control else None)
        return finish_boundary(pending)

    def _inner_step(self, started: float, tokens: int, loss_sum: float, loss_tokens: int, request: Request):
        self.engine.step()
        self.since_sync += 1
        self.tokens_since_sync += loss_tokens
        samples_seen = self.state.samples_seen + layout.step_samples(self.members)
        loss = loss_sum / loss_tokens if loss_tokens else None
        self.state = TrainState(self.state.step + 1, samples_seen, loss, self.state.eval_loss)
        if not (self.since_sync >= self.every or self.state.step >= self.launch.max_steps):
            self.pacer.wait(started, tokens)
            self._report(tokens, time.perf_counter() - started)
            return Request()  # control requests wait for the sync, where every island acts on them
        # A boundary. The island's own arithmetic (its delta; the outer step of the round that crossed
        # while it trained) is the chip's work, inside its modelled step like the inner optimizer's;
        # what it waited for across the bridge, and everything after the pacing, comes on top.
        round_ = self._prepare(request)
        decided, waited = Request(), 0.0
        if self.in_flight is not None:
            landing, self.in_flight = self.in_flight, None
            decided, waited = self._land(landing, timed=False, now=round_.reached)
        elif self.bridge.leader:
            self.start = round_.reached  # nothing landed: the island goes on from where it is
        self.pacer.wait(started + waited, tokens)
        decided = self._outer_sync(round_, decided)
        self._report(tokens, time.perf_counter() - started)  # a sync's time counts in its step's
        return decided

    def _prepare(self, request: Request) -> Round:
        """This boundary's round: what the island trained since it began the round, and its tokens."""
        header = self._header(self.tokens_since_sync, 0.0, 0, request)
        reached = tensors.params(self.engine) if self.bridge.leader else None
        return Round(header, request, self.start, reached, self.tokens_since_sync, self.state.step)

    def _outer_sync(self, round_: Round, decided: Request) -> Request:
        """DiLoCo's outer step: token-weighted mean delta across the islands, Nesterov SGD on it.

        Overlapped (`IslandLaunch.overlap`), the round crosses while the islands train the next one and
        lands at the next boundary (`_inner_step`). It lands at once where every island must hold the
        global weights: the last step, a scheduled checkpoint, or what the landed round asked for."""
        self.landing_now = not self.island.overlap or self._landing_due(decided)
        healed = self.bridge.begin()
        if healed is not None:
            self.heal(healed)  # a newcomer sends a zero delta with zero weight this time
            round_ = self._prepare(round_.request)
        sync = self.bridge.start(round_.header, self._delta(round_))
        round_ = dataclasses.replace(round_, base=self.start, sync=sync)
        self.since_sync, self.tokens_since_sync = 0, 0
        if not self.landing_now:
            self.in_flight = round_
            return decided
        landed, _ = self._land(round_, timed=True, now=round_.base)
        return Request(
            checkpoint=decided.checkpoint or landed.checkpoint,
            stop=decided.stop or landed.stop,
            export=decided.export or landed.export,
        )

    def _landing_due(self, decided: Request) -> bool:
        """What every island knows alike: this boundary's step, and the round it has just landed."""
        final = self.state.step >= self.launch.max_steps
        return final or super()._due() or decided.checkpoint or decided.stop

    def _delta(self, round_: Round) -> torch.Tensor | None:
        """(the weights the island began the round with − those it reached) × its tokens: the leader's
        payload, made afresh for each try, since a failed allreduce may leave its tensor half-summed."""
        if not self.bridge.leader:
            return None
        delta = torch.sub(round_.start, round_.reached)
        return delta.mul_(round_.tokens)

    def _land(self, round_: Round, timed: bool, now: torch.Tensor | None) -> tuple[Request, float]:
        """Wait for a round and apply its outer step. The island takes the new global weights plus what
        it trained since it sent the round (from the round's `base` to `now`: nothing, landing at once).
        Returns what the round asked for and the seconds spent waiting across the bridge."""
        began = time.perf_counter()
        outcome = self.bridge.finish(round_.sync, timed)
        for _ in range(SYNC_RETRIES):  # an island left mid-sync: the others try again without it
            if outcome.committed:
                break
            self._event("dropped")
            self.bridge.begin()
            outcome = self.bridge.exchange(round_.header, self._delta(round_))
        waited = time.perf_counter() - began
        new_params = torch.empty(self.bridge.payload_size, dtype=torch.float32)
        if self.bridge.leader:
            if outcome.committed:
                self.global_params.grad = outcome.payload.div_(max(outcome.header.weight, 1.0))
                self.outer.step()
                self.outer.zero_grad()
            # A failed sync: back to the last global weights (plus what was trained since it was sent).
            new_params = self.global_params.detach() + (now - round_.base)
            self.start = new_params
        tensors.set_params(self.engine, self.bridge.share(new_params))
        if outcome.committed:
            self.members = outcome.header.members
            self.primary = outcome.primary
        self._event("sync", round_step=round_.step)
        return self._request(outcome, round_.request), waited

    def _advance(self, outcome: Outcome, started: float, tokens: int, loss: float | None) -> Request:
        """After a committed step-mode sync: the data moves on by every member's batch."""
        changed = outcome.header.members != self.members
        self.members, self.primary = outcome.header.members, outcome.primary
        samples_seen = self.state.samples_seen + layout.step_samples(self.members)
        self.state = TrainState(self.state.step + 1, samples_seen, loss, self.state.eval_loss)
        self._report(tokens, time.perf_counter() - started)
        if changed:
            self._event("members")
        elif self.state.step % FIGURES_EVERY == 0 or self.state.step >= self.launch.max_steps:
            self._event("sync")  # the figures (syncs, bytes across) now and then, not every step
        return self._request(outcome, Request())

    def _header(self, weight: float, loss_sum: float, loss_tokens: int, request: Request) -> Header:
        return Header(
            weight=float(weight),
            loss_sum=float(loss_sum),
            loss_tokens=float(loss_tokens),
            checkpoint=request.checkpoint,
            stop=request.stop,
            export=request.export,
            members={self.island.index: self.batch},
        )

    @staticmethod
    def _request(outcome: Outcome, own: Request) -> Request:
        """What every island does at this boundary: what any of them was asked."""
        if not outcome.committed:
            return own
        header = outcome.header
        return Request(checkpoint=header.checkpoint, stop=header.stop, export=header.export)

    def _report_dropped(self, started: float) -> None:
        self._event("dropped")
        self._log(f"island {self.island.index}: step {self.state.step + 1} dropped (an island left mid-sync)")

    def _event(self, change: str, **extra) -> None:
        """An `island` event: joined, sync (diloco), members (who takes part changed) or dropped; the
        leader's carry `bridge_gbps`, the bridge it measured since its last one, when it sent anything.
        A diloco sync says the step its round was sent at (`round_step`: the step before, by H, when
        it crossed while the islands trained)."""
        figures = self._figures()
        self.events.emit("island", step=self.state.step, island=self.island.index, change=change, **figures, **extra)

    def _figures(self) -> dict:
        figures = {
            "members": sorted(self.members),
            "syncs": self.bridge.syncs,
            "bytes_across": self.bridge.bytes_across,
            "stack": self.island.stack,
            "mode": self.island.mode,
        }
        gbps = self.bridge.take_gbps()  # the leader's measured bridge, over the syncs since its last event
        if gbps is not None:
            figures["bridge_gbps"] = gbps
        return figures

    def _due(self) -> bool:
        """Scheduled checkpoints fall on syncs in diloco mode: between them an island holds only its own weights."""
        return super()._due() and self.since_sync == 0

    def save(self, export: bool, stopping: bool = False) -> None:
        """Only the primary island writes the run's checkpoints; the others hold the same weights."""
        if self.primary:
            super().save(export, stopping)
        else:
            self.saved = (self.state.step, export)

    @staticmethod
    def _log(line: str) -> None:
        import sys

        print(line, file=sys.stderr, flush=True)
