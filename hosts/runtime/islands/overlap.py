"""Step mode's gradients cross the bridge while the backward pass is still running, as DDP's buckets do.

The island's trainable parameters are cut into buckets of about `BUCKET_BYTES`, in reverse order (the
order their gradients come out of a backward pass). A bucket's allreduce starts, through torchft's
Manager, as soon as every gradient in it is final (a post-accumulate-grad hook), and only after every
bucket before it has started, so that every island issues the same collectives in the same order. What
was not ready when the backward pass ended (a parameter the loss never reached has no gradient: zeros)
goes at `flush`. The sum is the same tensor the one-shot exchange would send, bucket by bucket, so
step mode stays exactly one flat world.

Only an island of one rank at ZeRO 0 overlaps: its `param.grad` is the island's whole gradient the
moment autograd writes it. A larger island first reduces its gradients inside itself (DeepSpeed, at
the end of its backward), and ZeRO 1-2 move them into partitions; those islands `send` the whole
reduced gradient after the backward pass, cut into the same buckets, so every island's leader issues
the same allreduces whichever way its island computes.

For a simulated chip, `exposed` says how much of the bridge the chip's modelled step could not hide.
A real chip's backward pass is `BACKWARD_SHARE` of its forward-and-backward time (twice the forward's
FLOPs), and buckets can only cross during it: the modelled transfer begins no earlier than the modelled
backward does and lasts at least what the real one took from its first bucket to its last byte, and the
last bucket (the first layer's, usually the embedding) can only start when the backward pass ends: it
crosses alone, once the others are across, and its own time is added to the step whatever else is
hidden. Whatever of the transfer runs past the modelled compute is added too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket size
BACKWARD_SHARE = 2 / 3  # of a step's forward-and-backward time: the window buckets can cross in


@dataclass(frozen=True)
class Crossing:
    """One step's overlapped transfer, in `time.perf_counter()` seconds."""

    first_launch: float  # the first bucket's allreduce started
    last_launch: float  # the last bucket's started
    before_last_done: float  # every bucket but the last had finished (as far as `wait` could see)
    done: float  # the last byte arrived

    @property
    def busy_s(self) -> float:
        """An upper bound of the link's busy time: from the first bucket out to the last byte in."""
        return self.done - self.first_launch

    @property
    def last_bucket_s(self) -> float:
        """The last bucket's own transfer (it cannot overlap a real backward pass). `flush` starts it
        alone once the others are across, so this is its time on an otherwise idle link."""
        return self.done - max(self.last_launch, self.before_last_done)

    def exposed(self, started: float, modelled_s: float) -> float:
        """Seconds of the transfer a chip whose forward-and-backward takes `modelled_s` would not hide."""
        backward_begins = started + modelled_s * (1 - BACKWARD_SHARE)
        modelled_done = max(self.done, backward_begins + self.busy_s)
        return max(self.last_bucket_s, modelled_done - (started + modelled_s))


class GradientBuckets:
    """The island's gradients in buckets whose allreduce starts as the backward pass makes them."""

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        allreduce: Callable[[torch.Tensor], object],
        *,
        hooks: bool,
        bucket_bytes: int = BUCKET_BYTES,
    ) -> None:
        """`params` in the flat order the bridge uses; `allreduce(tensor)` starts a sum across the islands
        in place and returns something with `wait()` (torchft's Manager.allreduce); `hooks`: start each
        bucket as the backward pass makes it (`arm` and `flush`), else `send` them all after it."""
        self.allreduce = allreduce
        self.buckets = _buckets(params, bucket_bytes)
        self.bucket_of = {id(param): index for index, bucket in enumerate(self.buckets) for param in bucket}
        self.offsets = _offsets(params)
        self.armed = False
        self.before_last_done: float | None = None  # flush: when every bucket but the last was across
        self.weight = 0.0
        self.ready: list[int] = []
        self.launched: list[tuple[torch.Tensor, object, float]] = []
        self.handles = []
        if hooks:
            self.handles = [param.register_post_accumulate_grad_hook(self._gradient_ready) for param in params]

    def arm(self, weight: float) -> None:
        """Before a backward pass whose gradients cross: each is sent multiplied by `weight` (the island's
        loss tokens, so that the sum is the token-weighted total)."""
        self.armed, self.weight = True, float(weight)
        self.ready = [0] * len(self.buckets)
        self.launched = []

    def flush(self) -> None:
        """After the backward pass: start every bucket not yet started (missing gradients are zeros), the
        last one alone on the link once the others are across, so that its own time is measured."""
        while len(self.launched) < len(self.buckets) - 1:
            self._launch(len(self.launched))
        for _, work, _ in self.launched:
            work.wait()
        self.before_last_done = time.perf_counter()
        self._launch(len(self.buckets) - 1)
        self.armed = False

    def send(self, flat: torch.Tensor, weight: float) -> None:
        """Start every bucket from `flat` (the bridge's order: `params`), each multiplied by `weight`."""
        self.launched = []
        for bucket in self.buckets:
            pieces = [flat[self.offsets[id(param)] : self.offsets[id(param)] + param.numel()] for param in bucket]
            self._start(torch.cat(pieces) * float(weight))

    def wait(self) -> tuple[torch.Tensor, Crossing]:
        """The summed gradient (flat, float32) and when its buckets crossed."""
        pieces = []
        for tensor, work, _ in self.launched[:-1]:
            work.wait()
            pieces.append(tensor)
        before_last_done = self.before_last_done if self.before_last_done is not None else time.perf_counter()
        self.before_last_done = None
        tensor, work, last_launch = self.launched[-1]
        work.wait()
        done = time.perf_counter()
        pieces.append(tensor)
        crossing = Crossing(self.launched[0][2], last_launch, before_last_done, done)
        self.launched = []
        return torch.cat(pieces), crossing

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def _gradient_ready(self, param: torch.nn.Parameter) -> None:
        if not self.armed:
            return
        self.ready[self.bucket_of[id(param)]] += 1
        # Buckets start in order: a bucket waits for every earlier one, whatever order autograd took. The
        # last waits for `flush`.
        while len(self.launched) < len(self.buckets) - 1:
            index = len(self.launched)
            if self.ready[index] < len(self.buckets[index]):
                break
            self._launch(index)

    def _launch(self, index: int) -> None:
        bucket = self.buckets[index]
        self._start(torch.cat([_gradient(param).reshape(-1).float().cpu() for param in bucket]) * self.weight)

    def _start(self, piece: torch.Tensor) -> None:
        """Start summing one bucket across the islands, in place; remember when."""
        self.launched.append((piece, self.allreduce(piece), time.perf_counter()))


def reorder(summed: torch.Tensor, buckets: GradientBuckets) -> torch.Tensor:
    """The buckets' concatenation (reverse parameter order) back into the bridge's flat order."""
    out = torch.empty_like(summed)
    position = 0
    for bucket in buckets.buckets:
        for param in bucket:
            start = buckets.offsets[id(param)]
            out[start : start + param.numel()] = summed[position : position + param.numel()]
            position += param.numel()
    return out


def _buckets(params: list[torch.nn.Parameter], bucket_bytes: int) -> list[list[torch.nn.Parameter]]:
    """Reverse parameter order (a backward pass's), cut every `bucket_bytes` of float32."""
    buckets: list[list[torch.nn.Parameter]] = [[]]
    size = 0
    for param in reversed(params):
        if buckets[-1] and size + param.numel() * 4 > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(param)
        size += param.numel() * 4
    return [bucket for bucket in buckets if bucket]


def _offsets(params: list[torch.nn.Parameter]) -> dict[int, int]:
    offsets, position = {}, 0
    for param in params:
        offsets[id(param)] = position
        position += param.numel()
    return offsets


def _gradient(param: torch.nn.Parameter) -> torch.Tensor:
    return param.grad.detach() if param.grad is not None else torch.zeros_like(param)
