"""Step mode's gradient crosses the bridge in buckets while the backward pass runs (hosts.runtime.islands.overlap).

The buckets carry exactly the gradient a one-shot exchange would, start in one order on every island,
and the pacing of a simulated chip adds only what its modelled backward pass could not hide.
"""

from __future__ import annotations

import torch

from hosts.runtime.islands import tensors
from hosts.runtime.islands.overlap import BACKWARD_SHARE, Crossing, GradientBuckets, reorder


class _Done:
    def wait(self) -> None:
        pass


class _Recorder:
    """An allreduce across one island: the sum is the tensor itself; it records what started, in order."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def __call__(self, tensor: torch.Tensor) -> _Done:
        self.started.append(tensor.numel())
        return _Done()


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)]
    return torch.nn.Sequential(*layers)


def _backward(model: torch.nn.Module) -> None:
    model(torch.randn(8, 16)).pow(2).sum().backward()


def test_buckets_started_during_the_backward_pass_sum_to_the_whole_gradient_times_the_weight():
    model = _model()
    params = list(model.parameters())
    started = _Recorder()
    buckets = GradientBuckets(params, started, hooks=True, bucket_bytes=1200)  # a few small buckets
    assert len(buckets.buckets) > 2
    buckets.arm(weight=3.0)
    _backward(model)
    during_backward = len(started.started)
    buckets.flush()
    summed, crossing = buckets.wait()
    # Every bucket but the last started before the pass ended; the last crosses alone, after the others.
    assert during_backward == len(buckets.buckets) - 1 and len(started.started) == len(buckets.buckets)
    want = tensors.flatten([param.grad for param in params]) * 3.0
    assert torch.equal(reorder(summed, buckets), want)
    assert crossing.done >= crossing.last_launch >= crossing.first_launch


def test_buckets_start_in_reverse_parameter_order_whichever_gradient_comes_first():
    model = _model()
    params = list(model.parameters())
    started = _Recorder()
    buckets = GradientBuckets(params, started, hooks=True, bucket_bytes=1)  # one parameter a bucket
    buckets.arm(weight=1.0)
    # The first layer's gradients made before the last layer's: nothing may start out of order.
    for param in params:
        param.grad = torch.ones_like(param)
        buckets._gradient_ready(param)
        assert started.started == [] or param is params[-1]
    buckets.flush()
    assert started.started == [param.numel() for param in reversed(params)]


def test_an_island_that_sends_after_its_backward_pass_issues_the_same_allreduces():
    model = _model()
    params = list(model.parameters())
    overlapped, after = _Recorder(), _Recorder()
    hooked = GradientBuckets(params, overlapped, hooks=True, bucket_bytes=1200)
    hooked.arm(weight=2.0)
    _backward(model)
    hooked.flush()
    from_hooks, _ = hooked.wait()

    sender = GradientBuckets(params, after, hooks=False, bucket_bytes=1200)
    sender.send(tensors.flatten([param.grad for param in params]), weight=2.0)
    from_flat, _ = sender.wait()
    assert after.started == overlapped.started
    assert torch.equal(from_flat, from_hooks)


def test_a_parameter_the_loss_never_reached_crosses_as_zeros():
    model = _model()
    params = list(model.parameters())
    buckets = GradientBuckets(params, _Recorder(), hooks=True, bucket_bytes=1)
    buckets.arm(weight=1.0)
    model[0](torch.randn(2, 16)).sum().backward()  # only the first layer has gradients
    buckets.flush()
    summed, _ = buckets.wait()
    flat = reorder(summed, buckets)
    first = params[0].numel() + params[1].numel()
    assert torch.equal(flat[:first], tensors.flatten([params[0].grad, params[1].grad]))
    assert not flat[first:].any()


def test_an_unarmed_backward_pass_starts_nothing():
    model = _model()
    started = _Recorder()
    GradientBuckets(list(model.parameters()), started, hooks=True, bucket_bytes=1)
    _backward(model)  # an evaluation's or another mode's backward pass
    assert started.started == []


class TestWhatTheModelledChipCannotHide:
    STEP = 10.0  # the chip's modelled forward-and-backward seconds
    FORWARD_ENDS = STEP * (1 - BACKWARD_SHARE)

    def test_a_transfer_inside_the_modelled_backward_pass_costs_only_its_last_bucket(self):
        crossing = Crossing(first_launch=1.0, last_launch=2.0, before_last_done=2.5, done=3.0)
        assert crossing.exposed(started=0.0, modelled_s=self.STEP) == 0.5

    def test_the_transfer_cannot_start_before_the_modelled_backward_pass(self):
        # Real compute ran fast: 8 s of transfer began at 0.5 s, but the chip's backward starts at 3.3 s.
        crossing = Crossing(first_launch=0.5, last_launch=1.0, before_last_done=8.0, done=8.5)
        exposed = crossing.exposed(started=0.0, modelled_s=self.STEP)
        assert exposed == self.FORWARD_ENDS + crossing.busy_s - self.STEP

    def test_a_transfer_that_really_ran_past_the_modelled_step_adds_what_ran_over(self):
        crossing = Crossing(first_launch=4.0, last_launch=5.0, before_last_done=11.0, done=12.0)
        assert crossing.exposed(started=0.0, modelled_s=self.STEP) == 2.0

    def test_the_last_bucket_is_never_hidden(self):
        crossing = Crossing(first_launch=4.0, last_launch=4.1, before_last_done=4.2, done=5.2)
        assert crossing.last_bucket_s == crossing.exposed(started=0.0, modelled_s=self.STEP)
