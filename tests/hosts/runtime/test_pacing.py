"""A simulated chip's step lasts its modelled time, or longer, never shorter."""

from __future__ import annotations

import pytest

from hosts.runtime.pacing import Pacer


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_fast_compute_is_padded_to_the_modelled_time():
    clock = FakeClock()
    pacer = Pacer(2000.0, clock=clock, sleep=clock.sleep)
    clock.now += 0.010  # the real compute took 10 ms
    pacer.wait(step_started=100.0, tokens=128)  # 128 tokens at 2000 tok/s = 64 ms
    assert clock.slept == [pytest.approx(0.054)]
    assert clock.now == pytest.approx(100.064)


def test_a_slow_compute_is_not_padded():
    clock = FakeClock()
    pacer = Pacer(2000.0, clock=clock, sleep=clock.sleep)
    clock.now += 0.200
    assert pacer.wait(step_started=100.0, tokens=128) == 0.0
    assert clock.slept == []


def test_without_a_modelled_speed_nothing_waits():
    clock = FakeClock()
    assert Pacer(None, clock=clock, sleep=clock.sleep).wait(100.0, 10_000) == 0.0
    assert clock.slept == []


def test_a_non_positive_speed_is_refused():
    with pytest.raises(ValueError):
        Pacer(0.0)
