"""One rank's training loop: heterogeneous data parallelism over DeepSpeed.

Rank r trains on its own micro-batch `micro_batches[r]` each step. Its loss is the SUM of its
target tokens' losses × world_size / the global batch's number of target tokens (masked tokens,
such as a chat's user turns, left out), so when DeepSpeed averages gradients over the ranks the
result is exactly the gradient of the mean loss over the whole global batch, however unevenly
the batch (and its loss tokens) is split. Every rank knows the global count without talking to
the others: the data is addressed by global sample index.

With an eval set, every `eval_every` steps and at the end the ranks split its records, each
record scored on its own, and sum: eval loss = mean cross-entropy over all their target tokens.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from hosts.runtime import checkpoint, staging, untrusted
from hosts.runtime.checkpoint import TrainState
from hosts.runtime.control import ControlFile, Request
from hosts.runtime.data import TrainingData, open_data, shard
from hosts.runtime.engine import Placement, build_engine, check_launch, hyperparameters_of, init_distributed
from hosts.runtime.events import EventStream
from hosts.runtime.hfmodel import ModelSource, spec_from_dict, token_loss_sum
from hosts.runtime.pacing import Pacer
from hosts.runtime.progress import ProgressLog, progress_line
from hosts.runtime.tracking import Tracker, grad_norm, logs_run
from kernel.protocol import RankLaunch
from kernel.storage import locations


def scaled_loss(loss_sum: torch.Tensor, world_size: int, global_loss_tokens: int) -> torch.Tensor:
    """What this rank backpropagates: averaging it over ranks gives the global-batch mean."""
    return loss_sum * (world_size / max(global_loss_tokens, 1))


def forward_backward(engine, batch: tuple[torch.Tensor, torch.Tensor], world_size: int, global_loss_tokens: int):
    """Forward and backward (DeepSpeed reduces the gradients); returns the token-loss sum."""
    ids, mask = batch
    loss_sum, _ = token_loss_sum(engine, ids, mask)
    engine.backward(scaled_loss(loss_sum, world_size, global_loss_tokens))
    return loss_sum.detach()


def evaluate(model: torch.nn.Module, examples: list, placement: Placement) -> tuple[float | None, int]:
    """Collective: (mean target-token cross-entropy over the eval records, target tokens), each record alone."""
    totals = torch.zeros(2, dtype=torch.float64, device=placement.device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for ids, mask in examples[placement.rank :: placement.world_size]:
            ids_t = torch.tensor([ids], dtype=torch.long, device=placement.device)
            mask_t = torch.tensor([mask], dtype=torch.bool, device=placement.device)
            loss, tokens = token_loss_sum(model, ids_t, mask_t)
            totals += torch.stack([loss.double(), torch.tensor(float(tokens), dtype=torch.float64)]).to(totals)
    model.train(was_training)
    dist.all_reduce(totals)
    loss_sum, tokens = totals.tolist()
    return (loss_sum / tokens if tokens else None), int(tokens)


def start_boundary(loss_sum: torch.Tensor, request: Request | None):
    """One tiny all_reduce, started at once: the global loss sum and rank 0's control decision.

    Only rank 0 passes a request; the others add zeros, so the sum is rank 0's flags.
    Asynchronous so that it completes while the optimizer steps and a simulated chip waits
    out its modelled time, instead of adding a synchronisation point at the end of every step.
    """
    flags = [request.checkpoint, request.stop, request.export] if request else [False] * 3
    packed = torch.tensor([0.0, *map(float, flags)], dtype=torch.float64, device=loss_sum.device)
    packed[0] = loss_sum.detach().double()
    return packed, dist.all_reduce(packed, async_op=True)


def finish_boundary(pending) -> tuple[float, Request]:
    """Wait for `start_boundary`'s all_reduce; every rank gets the same loss and decision."""
    packed, work = pending
    work.wait()
    total, wanted, stop, export = packed.tolist()
    return total, Request(checkpoint=wanted > 0, stop=stop > 0, export=export > 0)


def memory_mb(placement: Placement) -> float:
    """Peak CUDA memory allocated on a GPU; resident set size on a CPU."""
    if placement.cuda:
        return torch.cuda.max_memory_allocated(placement.device) / 2**20
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Trainer:
    """The step loop, control handling and checkpoint schedule of one rank."""

    def __init__(
        self,
        launch: RankLaunch,
        placement: Placement,
        engine,
        state: TrainState,
        *,
        events: EventStream,
        data: TrainingData,
        resumed: Path | str | None = None,
    ) -> None:
        self.launch, self.placement, self.engine, self.state = launch, placement, engine, state
        self.events, self.corpus, self.eval_examples = events, data.corpus, data.eval_examples
        self.spec = spec_from_dict(launch.model)
        self.source = ModelSource.from_launch(launch.model)
        self.evaluated_at = -1
        self.pacer = Pacer(launch.paced_tokens_per_s)
        self.control = ControlFile(launch.run_dir, launch.epoch) if placement.rank == 0 else None
        self.global_batch = sum(launch.micro_batches)
        self.saved = (state.step, False) if resumed else (-1, False)  # (step, exported)
        self.progress = ProgressLog(launch.max_steps) if placement.rank == 0 else None
        self.last_path: str | None = str(resumed) if resumed else None
        self.rate = engine.step_schedule.align(state.step)
        self.tracker = Tracker(launch, events) if logs_run(launch, placement.rank) else None

    def run(self) -> TrainState:
        """Train to max_steps or until stopped; the final model is always saved and exported."""
        try:
            return self._train()
        finally:
            if self.tracker:
                self.tracker.close()

    def _train(self) -> TrainState:
        request = Request()
        while self.state.step < self.launch.max_steps and not request.stop:
            request = self.step()
            if self._eval_due():
                self.evaluate()
            if request.checkpoint or self._due():
                final = self.state.step >= self.launch.max_steps
                self.save(export=(request.stop and request.export) or final, stopping=request.stop)
        if not request.stop and self.eval_examples and self.evaluated_at != self.state.step:
            self.evaluate()
        if not request.stop and self.saved != (self.state.step, True):
            self.save(export=True)
        if self.tracker:
            self.tracker.close()  # the event files are stored before the run says it is done
        self.events.done(
            self.state.step, self.state.loss, path=self.last_path, stopped=request.stop, eval_loss=self.state.eval_loss
        )
        return self.state

    def evaluate(self) -> None:
        loss, tokens = evaluate(self.engine.module, self.eval_examples, self.placement)
        self.state.eval_loss, self.evaluated_at = loss, self.state.step
        if self.placement.rank == 0:
            self.events.eval(self.state.step, loss, tokens)
        if self.tracker:
            self.tracker.scalars(self.state.step, {"eval/loss": loss})

    def _eval_due(self) -> bool:
        every = self.launch.eval_every
        return bool(self.eval_examples) and bool(every) and self.state.step % every == 0

    def step(self) -> Request:
        """One paced training step; returns the decision all ranks take at its boundary.

        Rank 0 reads control.json once its gradients are reduced; the decision travels with
        the loss in the step's one extra all_reduce, so every rank acts on it after this step.
        """
        started = time.perf_counter()
        self.set_rate()
        first, count = shard(self.state.samples_seen, self.launch.micro_batches, self.placement.rank)
        ids, mask = self.corpus.batch(first, count)
        batch = (ids.to(self.placement.device), mask.to(self.placement.device))
        global_loss_tokens = self.corpus.loss_tokens(self.state.samples_seen, self.global_batch)
        loss_sum = forward_backward(self.engine, batch, self.placement.world_size, global_loss_tokens)
        pending = start_boundary(loss_sum, self.control.poll() if self.control else None)
        self.engine.step()
        if self.placement.cuda:
            torch.cuda.synchronize(self.placement.device)
        tokens = count * self.spec.seq_len
        self.pacer.wait(started, tokens)
        total, request = finish_boundary(pending)
        elapsed = time.perf_counter() - started
        samples_seen = self.state.samples_seen + self.global_batch
        loss = total / global_loss_tokens if global_loss_tokens else None
        self.state = TrainState(self.state.step + 1, samples_seen, loss, self.state.eval_loss)
        self._report(tokens, elapsed)
        return request

    def set_rate(self) -> float:
        """This step's learning rate, from the step count alone (a resumed or healed run's too)."""
        self.rate = self.engine.step_schedule.align(self.state.step)
        return self.rate

    def save(self, export: bool, stopping: bool = False) -> None:
        """Every checkpoint carries its Hugging Face form (model/ or a LoRA adapter/) so that it downloads as a
        model, except a stop that was asked not to export (a quick one)."""
        hf = export or not stopping
        path, seconds = checkpoint.save(self.engine, self.launch, self.placement, self.state, export, hf=hf)
        self.saved, self.last_path = (self.state.step, export), str(path)
        if self.placement.rank == 0:
            evaluated = self.state.eval_loss if self.evaluated_at == self.state.step else None
            self.events.checkpoint(
                self.state.step, str(path), seconds, stopping=stopping, loss=self.state.loss, eval_loss=evaluated
            )
        if self.tracker:
            self.tracker.flush()

    def _due(self) -> bool:
        every = self.launch.checkpoint_every
        return bool(every) and self.state.step % every == 0

    def _report(self, tokens: int, elapsed: float) -> None:
        self.events.metric(
            step=self.state.step,
            loss=self.state.loss,
            tokens=tokens,
            tokens_per_s=round(tokens / elapsed, 2),
            step_time_s=round(elapsed, 5),
            samples_seen=self.state.samples_seen,
            memory_mb=round(memory_mb(self.placement), 1),
            lr=self.rate,
        )
        # Rank 0's step spans the whole job's (every rank meets at its boundary): the job's tokens/s.
        job_tokens_per_s = self.global_batch * self.spec.seq_len / elapsed
        if self.tracker:
            figures = {"train/loss": self.state.loss, "train/lr": self.rate, "train/tokens_per_s": job_tokens_per_s}
            self.tracker.scalars(self.state.step, {**figures, "train/grad_norm": grad_norm(self.engine)})
        if self.progress and self.progress.due(self.state.step):
            _log(progress_line(self.state.step, self.launch.max_steps, self.state.loss, job_tokens_per_s, elapsed))


def run(launch: RankLaunch, events: EventStream) -> TrainState:
    """Join the job, build or restore the engine, train, leave the process group."""
    check_launch(launch)
    untrusted.load_weights_only()  # before any checkpoint file is read
    launch = staging.stage_inputs(launch)  # stored dataset and model folder: copies on this host's disk
    spec, source = spec_from_dict(launch.model), ModelSource.from_launch(launch.model)
    data = open_data(  # a bad dataset fails before any rendezvous
        launch.dataset,
        spec,
        launch.seed,
        tokenizer_path=source.path,
        eval_dataset=launch.eval_dataset,
        eval_fraction=launch.eval_fraction,
        train_on_inputs=hyperparameters_of(launch).train_on_inputs,
    )
    clock = _PhaseClock()
    placement = init_distributed(launch)
    clock.mark("process group")
    try:
        plan = checkpoint.plan_resume(launch, placement)
        checkpoint.prepare(plan, placement, int(launch.extra.get("convert_workers", 1)))
        clock.mark("convert")
        universal = plan is not None and plan.mode == checkpoint.UNIVERSAL
        engine = build_engine(launch, source, placement, load_universal=universal)
        clock.mark("engine")
        state = checkpoint.load(engine, plan, placement, lora=source.is_lora) if plan else TrainState()
        clock.mark("load")
        resumed = f"resumed {plan.mode} from {plan.step_dir} at step {state.step}" if plan else "fresh start"
        _log(f"rank {placement.rank}/{placement.world_size} on {placement.device}: {resumed}; {clock}")
        resumed = (locations.stored(plan.key) if plan.key else plan.step_dir) if plan else None
        if launch.island is None:
            trainer = Trainer(launch, placement, engine, state, events=events, data=data, resumed=resumed)
        else:
            from hosts.runtime.islands.trainer import IslandTrainer
            from kernel.protocol import IslandLaunch

            island = IslandLaunch.from_dict(launch.island)
            trainer = IslandTrainer(
                launch, placement, engine, state, events=events, data=data, resumed=resumed, island=island
            )
        result = trainer.run()
        _leave_together()
        return result
    finally:
        dist.destroy_process_group()


def _leave_together() -> None:
    """Wait for every rank to be done before tearing the group down.

    A rank that destroys its group while a peer's collective library still has traffic in flight can make
    that peer abort in C++ ("terminate called without an active exception", exit -6) after a finished
    run; a barrier first lets the last collective complete everywhere. A peer that already died makes the
    barrier fail, which changes nothing: this rank's work is done either way.
    """
    try:
        dist.barrier()
    except Exception as error:  # noqa: BLE001 (a dead peer: nothing left to wait for)
        _log(f"leaving without the other ranks: {type(error).__name__}")


class _PhaseClock:
    """Start-up timings for the log: where a rank's first seconds go."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter()
        self.phases: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases.append((phase, now - self.last))
        self.last = now

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.phases)
        return f"ready in {self.last - self.started:.2f} s ({parts})"


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
