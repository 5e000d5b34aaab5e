"""Where an island's samples sit in each step's global batch, and the header each sync carries.

Data is addressed by global sample index, as in one world. A step's global batch is the member
islands' batches laid end to end in island order: island i trains on
[samples_seen + (the batches of the members numbered below i), + its own batch). samples_seen then
advances by the members' batches together. Membership is what the last sync said (an island that
joins takes a number above every earlier one, so its samples follow everybody else's); an island
that leaves mid-step leaves a gap of its own batch in that one step, never a repeat.

The header is a small float64 vector summed across islands with the payload: the payload's weight
(tokens), the loss sum and its tokens, the control flags, and one slot per island holding its batch
when it took part.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_ISLANDS = 16
_WEIGHT, _LOSS, _LOSS_TOKENS, _CHECKPOINT, _STOP, _EXPORT = range(6)
_SLOTS = 6
HEADER_SIZE = _SLOTS + MAX_ISLANDS


def first_sample(samples_seen: int, members: dict[int, int], index: int) -> int:
    """The first global sample index of island `index` in the step that starts at `samples_seen`."""
    return samples_seen + sum(batch for island, batch in members.items() if island < index)


def step_samples(members: dict[int, int]) -> int:
    """How far a step moves the data position: every member island's batch."""
    return sum(members.values())


@dataclass(frozen=True)
class Header:
    """What one island adds to a sync, and (after the sum) what the islands together did."""

    weight: float  # tokens behind the payload: the payload crosses multiplied by it
    loss_sum: float
    loss_tokens: float
    checkpoint: bool
    stop: bool
    export: bool
    members: dict[int, int]  # {island: batch} of the islands that took part

    def pack(self) -> torch.Tensor:
        header = torch.zeros(HEADER_SIZE, dtype=torch.float64)
        header[_WEIGHT], header[_LOSS], header[_LOSS_TOKENS] = self.weight, self.loss_sum, self.loss_tokens
        header[_CHECKPOINT], header[_STOP], header[_EXPORT] = map(float, (self.checkpoint, self.stop, self.export))
        for island, batch in self.members.items():
            if not 0 <= island < MAX_ISLANDS:
                raise ValueError(f"island {island} is outside 0..{MAX_ISLANDS - 1}")
            header[_SLOTS + island] = batch
        return header

    @classmethod
    def unpack(cls, header: torch.Tensor) -> Header:
        values = header.double().tolist()
        slots = values[_SLOTS : _SLOTS + MAX_ISLANDS]
        return cls(
            weight=values[_WEIGHT],
            loss_sum=values[_LOSS],
            loss_tokens=values[_LOSS_TOKENS],
            checkpoint=values[_CHECKPOINT] > 0,
            stop=values[_STOP] > 0,
            export=values[_EXPORT] > 0,
            members={island: round(batch) for island, batch in enumerate(slots) if batch > 0},
        )

    @property
    def loss(self) -> float | None:
        return self.loss_sum / self.loss_tokens if self.loss_tokens else None
