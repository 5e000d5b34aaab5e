"""Islands across a throttled bridge (#30): throughput, traffic, loss and a reclaimed island.

    sudo .venv/bin/python bench/islands.py [--quick] [--modes step,diloco] [--steps 12] [--sync-every 4]

The demo stacks as three islands of one simulated chip each: RTX 4090 (cuda), TPU v5e (xla) and
Ascend 910B (cann). Each rank is paced to its chip's modelled speed (bf16 TFLOPS x default MFU /
training FLOPs per token, kernel.catalog) divided by one slowdown, chosen so that the slowest
island's step lasts `--step-s` seconds here; each island's micro-batch is proportional to its
speed. A step of `--step-s` here is what a real island's step would last on `slowdown` times the
micro-batch: the bench models islands with large real batches (printed), which is where the
bridge's cost per step is what the table measures.

Each island runs in its own network namespace behind a veth pair throttled with tc tbf (this kernel
has no netem) to `--rate-step` (10 Gbit/s) in step mode and `--rate-diloco` (1 Gbit/s) in diloco
mode; the torchft Lighthouse listens on the bridge in the root namespace. Without root (or without
iproute2) everything runs on 127.0.0.1, unthrottled, and the table says so.

Measured, each from the ranks' own metric events (the `t` of each step, so time at the quorum and
in diloco's outer sync counts, which `step_time_s` leaves out):
- alone: each island as a one-rank job, same micro-batch and pacing, the three at once (the same
  load on this host's cores as the island run), tokens/s after `--warmup` steps;
- island run / sum of alone: tokens/s of the three islands together over steps warmup..N (diloco:
  H..N, so the window holds whole H-step rounds and their syncs; overlapped diloco, as the platform
  runs it: H..N-H, whole rounds each with the landing of the round before, leaving out the run's last
  round, which lands at once, once per run);
- bytes between islands per step: what the islands sent over their veths (wire, TCP/IP included),
  and what the bridge counts (its own bytes_across, diloco's island events; step mode's formula);
- loss gap at equal tokens: the islands' token-weighted loss at the last step against one flat
  world (one DeepSpeed job of the three ranks, same micro-batches, unpaced: pacing does not change
  the loss) at the same step;
- reclaim: an island run in `--reclaim-mode` where one island's rank is killed with SIGKILL mid-run
  (a reclaimed host); the survivors' longest pause between steps, and the steps of work lost.

The Lighthouse runs with the platform's timeouts (5 s join, 5 s heartbeat: workers/services/lighthouses.py).
In diloco the islands reach a sync up to H x (slowest - fastest step) apart; an island that arrives more than
the join timeout after the first is left out of that quorum and has to heal (raise --join-timeout-ms for a
large H).

Steps are few (the model has >= 100M parameters and this host has few cores) and the host is
shared: figures are noisy. `--quick` runs a ~5M-parameter model for a smoke run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import islands_net  # noqa: E402
from bench.islands_runs import (  # noqa: E402
    BIG,
    ISLANDS,
    QUICK,
    Run,
    make_plan,
    model_for,
    run_alone,
    run_flat,
    run_islands,
)

# ---------------------------------------------------------------- figures


def rate(steps: dict[int, dict], start: int, end: int) -> float:
    """Tokens/s of one rank from step `start`'s end to step `end`'s (wall time between their events).

    Steps the rank never reported (it was out of the quorum and was healed past them) trained nothing
    on it: they count no tokens, and the time still passes."""
    reported = sorted(step for step in steps if start <= step <= end)
    tokens = sum(steps[step]["tokens"] for step in reported[1:])
    return tokens / (steps[reported[-1]]["t"] - steps[reported[0]]["t"])


def weighted_loss(run: Run, step: int, weights: list[int]) -> float:
    losses = [(steps[step]["loss"], w) for steps, w in zip(run.steps, weights, strict=True) if step in steps]
    return sum(loss * w for loss, w in losses) / sum(w for _, w in losses)


@dataclass
class Row:
    what: str
    value: str
    goal: str = ""
    met: bool | None = None


def print_table(title: str, rows: list[Row]) -> None:
    headers = ("measurement", "value", "goal", "")
    cells = [(r.what, r.value, r.goal or "-", "" if r.met is None else ("met" if r.met else "not met")) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)).rstrip())


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} GB"


def gbit(bits: float | None) -> str:
    return "unthrottled" if not bits else f"{bits / 1e9:g} Gbit/s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~5M-parameter model and short steps: a smoke run")
    parser.add_argument("--modes", default="step,diloco", help="island sync modes to measure (step, diloco)")
    parser.add_argument(
        "--steps", type=int, default=None, help="steps of each island run and the flat run (default 12; quick 6)"
    )
    parser.add_argument("--alone-steps", type=int, default=None, help="steps of the alone runs (default 4)")
    parser.add_argument("--warmup", type=int, default=1, help="steps left out of step-mode and alone throughput")
    parser.add_argument("--sync-every", type=int, default=None, help="diloco's H (default 4; quick 2)")
    parser.add_argument(
        "--step-s", type=float, default=None, help="modelled step time of the slowest island, s (default 10; quick 1.5)"
    )
    parser.add_argument(
        "--micro", type=int, default=2, help="micro-batch of the slowest island (the others in proportion)"
    )
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per sample (default 64)")
    parser.add_argument("--rate-step", type=float, default=10e9, help="bridge rate for step mode, bit/s")
    parser.add_argument("--rate-diloco", type=float, default=1e9, help="bridge rate for diloco mode, bit/s")
    parser.add_argument("--quorum-timeout", type=float, default=15.0, help="IslandLaunch.quorum_timeout_s")
    # The platform's Lighthouse settings (workers/services/lighthouses.py): local.Lighthouse's 2 s join timeout
    # is shorter than the spread of the islands' arrival at a diloco sync (H x the step-time imbalance).
    parser.add_argument("--join-timeout-ms", type=int, default=5000, help="torchft_lighthouse --join_timeout_ms")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=5000, help="torchft_lighthouse --heartbeat_timeout")
    parser.add_argument("--reclaim-mode", default="diloco", choices=("step", "diloco", "none"))
    parser.add_argument("--no-flat", action="store_true", help="skip the flat run (no loss gap)")
    parser.add_argument(
        "--no-overlap", action="store_true", help="diloco: land each sync before training on (the platform overlaps)"
    )
    parser.add_argument("--no-netns", action="store_true", help="no namespaces: 127.0.0.1, unthrottled")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (the ranks' logs)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is not met")
    args = parser.parse_args()
    sizes = dict(QUICK if args.quick else BIG)
    if args.seq_len:
        sizes["seq_len"] = args.seq_len
    args.steps = args.steps or (6 if args.quick else 12)
    args.alone_steps = args.alone_steps or 4
    args.sync_every = args.sync_every or (2 if args.quick else 4)
    args.step_s = args.step_s or (1.5 if args.quick else 10.0)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in ("step", "diloco"):
            parser.error(f"unknown mode {mode!r}")
    H = args.sync_every

    model, spec = model_for(sizes)
    plan = make_plan(spec, args.micro, args.step_s)
    reason = "--no-netns" if args.no_netns else islands_net.unavailable_reason()
    root = Path(tempfile.mkdtemp(prefix="bench-islands-"))
    print(
        f"model {spec.name}: {spec.parameters:,} parameters ({spec.parameters * 4 / 1e6:.0f} MB in float32), "
        f"seq_len {spec.seq_len}; host: {os.cpu_count()} cores (shared: figures are noisy); work folder {root}"
    )
    print(
        f"pacing: each chip's modelled speed / {plan.slowdown:,.0f}; one step here = the chip's step on "
        f"{plan.slowdown:,.0f}x the micro-batch"
    )
    print(
        f"{'island':<8}{'chip':<14}{'stack':<7}{'micro':>6}{'modelled tok/s':>16}{'paced tok/s':>13}"
        f"{'step s':>8}{'real batch (tokens)':>21}"
    )
    for i, (_, stack, label) in enumerate(ISLANDS):
        print(
            f"{i:<8}{label:<14}{stack:<7}{plan.micro[i]:>6}{plan.real_tokens_per_s[i]:>16,.0f}{plan.paced[i]:>13,.1f}"
            f"{plan.step_s(i):>8.2f}{plan.micro[i] * spec.seq_len * plan.slowdown:>21,.0f}"
        )
    sys.stdout.flush()

    net = None
    rows: list[Row] = []
    try:
        if reason is None:
            try:
                net = islands_net.IslandNetwork(len(ISLANDS))
                net.throttle(args.rate_diloco)  # tbf works here, or we fall back now
                if not net.reachable():
                    raise islands_net.NetworkUnavailable("the namespaces don't reach the bridge address")
            except islands_net.NetworkUnavailable as exc:
                reason = str(exc)
                if net is not None:
                    net.close()
                net = None
        throttling = "tc tbf on each island's veth (no netem in this kernel)" if net else f"none ({reason})"
        print(f"bridge throttling: {throttling}")

        def log(text: str) -> None:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

        log(f"alone: 3 one-rank jobs at once, {args.alone_steps} steps")
        alone = run_alone(args, root / "alone", model, plan)
        alone_rates = [rate(s, args.warmup, max(s)) for s in alone.steps]
        alone_sum = sum(alone_rates)
        log(
            "alone tokens/s: " + ", ".join(f"{r:,.1f}" for r in alone_rates) + f" (sum {alone_sum:,.1f}; paced sum "
            f"{sum(m * spec.seq_len / plan.step_s(i) for i, m in enumerate(plan.micro)):,.1f})"
        )
        rows.append(Row("tokens/s, sum of the islands trained alone", f"{alone_sum:,.1f}"))

        flat = None
        if not args.no_flat:
            log(f"flat: one world of 3 ranks, micro-batches {plan.micro}, {args.steps} steps, unpaced")
            flat = run_flat(args, root / "flat", model, plan, args.steps)
            log(
                f"flat done in {flat.seconds:.0f} s; loss at step {args.steps}: {flat.steps[0][args.steps]['loss']:.4f}"
            )

        weights = plan.micro
        payload = spec.parameters * 4
        n = len(ISLANDS)
        for mode in modes:
            bits = args.rate_step if mode == "step" else args.rate_diloco
            bits = bits if net else None
            # Overlapped diloco lands its last round at once, once per run: the window is the whole rounds
            # before it (each with its overlapped landing), so the run needs three rounds at least.
            overlapped = mode == "diloco" and not args.no_overlap
            rounds = 3 if overlapped else 2
            steps = args.steps if mode == "step" else max(rounds * H, (args.steps // H) * H)
            end = steps - H if overlapped else steps
            log(f"{mode}: {n} islands, {gbit(bits)}, {steps} steps" + (f", H={H}" if mode == "diloco" else ""))
            run = run_islands(args, root / mode, model, plan, mode, steps, net, bits)
            start = args.warmup if mode == "step" else H
            rates = [rate(s, start, end) for s in run.steps]
            ratio = sum(rates) / alone_sum
            log(f"{mode} done in {run.seconds:.0f} s; tokens/s " + ", ".join(f"{r:,.1f}" for r in rates))
            goal = 0.95 if mode == "step" else 0.90
            label = f"{mode}" + (f" H={H}" if mode == "diloco" else "") + (" overlapped" if overlapped else "")
            label += f" @ {gbit(bits)}"
            rows.append(
                Row(
                    f"{label}: tokens/s island run / sum alone",
                    f"{ratio:.3f} ({sum(rates):,.1f} tok/s)",
                    f">= {goal:.2f}",
                    ratio >= goal,
                )
            )
            # Where the time went: wall time per step (syncs included) against the slowest island's modelled step
            # (what the island run would take with a free bridge and no work outside the pacing).
            wall = statistics.mean((s[end]["t"] - s[start]["t"]) / (end - start) for s in run.steps)
            modelled = max(plan.step_s(i) for i in range(n))
            balanced = sum(m * spec.seq_len for m in plan.micro) / modelled / alone_sum
            rows.append(
                Row(
                    f"{label}: wall s per step (syncs included) vs slowest modelled step",
                    f"{wall:.2f} s vs {modelled:.2f} s (+{wall - modelled:.2f} s/step)",
                    f"ratio bound by island imbalance: {balanced:.3f}",
                )
            )
            syncs_per_step = 1.0 if mode == "step" else 1.0 / H
            counted = payload * 2 * (n - 1) / n * n * syncs_per_step  # every leader's ring share, all islands
            if mode == "diloco":
                last = [e for e in run.island_events[0] if e["change"] == "sync"]
                if last:
                    counted = (
                        sum(
                            max((e["bytes_across"] for e in ev if e["change"] == "sync"), default=0)
                            for ev in run.island_events
                        )
                        / steps
                    )
            if mode == "diloco":
                syncs = [[e["syncs"] for e in ev if e["change"] == "sync"] for ev in run.island_events]
                committed = [max(counts, default=0) for counts in syncs]
                drops = [sum(1 for e in ev if e["change"] == "dropped") for ev in run.island_events]
                want = steps // H
                rows.append(
                    Row(
                        f"{label}: outer syncs committed per island (dropped attempts)",
                        " / ".join(f"{c} ({d})" for c, d in zip(committed, drops, strict=True)),
                        f"{want} each",
                        all(c == want for c in committed),
                    )
                )
            value = f"bridge {human_bytes(counted)}"
            if run.wire:
                sent = sum(s for s, _ in run.wire) / steps
                value = f"wire {human_bytes(sent)}, " + value
            rows.append(Row(f"{label}: bytes between islands per step (all islands)", value))
            if flat is not None:
                island_loss, flat_loss = weighted_loss(run, steps, weights), flat.steps[0][steps]["loss"]
                gap = (island_loss - flat_loss) / flat_loss
                ok = abs(gap) < 1e-3 if mode == "step" else None
                rows.append(
                    Row(
                        f"{label}: loss gap at step {steps} vs flat world ({island_loss:.4f} vs {flat_loss:.4f})",
                        f"{gap * 100:+.3f}%",
                        "~0 (= flat)" if mode == "step" else "",
                        ok,
                    )
                )

        if args.reclaim_mode != "none":
            mode = args.reclaim_mode
            bits = (args.rate_step if mode == "step" else args.rate_diloco) if net else None
            steps = args.steps if mode == "step" else max(3 * H, (args.steps // H) * H)
            victim = n - 1
            at = H + H // 2 if mode == "diloco" else max(2, steps // 2)
            log(f"reclaim: {mode} @ {gbit(bits)}, island {victim} ({ISLANDS[victim][2]}) killed at step {at}")
            run = run_islands(args, root / "reclaim", model, plan, mode, steps, net, bits, kill=(victim, at))
            log(f"reclaim done in {run.seconds:.0f} s")
            rows += reclaim_rows(run, mode, steps, victim, args, H)
    finally:
        if net is not None:
            net.close()
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)

    title = (
        f"Islands bench: 3 islands (RTX 4090/cuda, TPU v5e/xla, Ascend 910B/cann, simulated, 1 rank each), "
        f"{spec.name} ({spec.parameters / 1e6:.1f}M parameters), {os.cpu_count()} cores, "
        f"bridge {'throttled with tc tbf (rate per row)' if net else 'NOT throttled (' + str(reason) + ')'}"
    )
    print()
    print_table(title, rows)
    return 1 if args.check and any(r.met is False for r in rows) else 0


def reclaim_rows(run: Run, mode: str, steps: int, victim: int, args, H: int) -> list[Row]:
    survivors = [i for i in range(len(run.steps)) if i != victim]
    pauses, lost_survivors, slowest = [], 0, 0.0
    for i in survivors:
        s = run.steps[i]
        times = [s[k]["t"] for k in sorted(s)]
        pauses.append(max(b - a for a, b in zip(times, times[1:], strict=False)))
        slowest = max(slowest, max(e["step_time_s"] for e in s.values()))
        missing = steps - len(s)  # steps a survivor never finished
        events = run.island_events[i]
        if mode == "step":
            discarded = sum(1 for e in events if e["change"] == "dropped")  # each dropped step is redone
        else:  # a sync that failed every retry sends the island back to the last one: H steps' work
            syncs = [e["syncs"] for e in events if e["change"] == "sync"]
            discarded = H * sum(1 for a, b in zip([0, *syncs], syncs, strict=False) if b == a)
        lost_survivors = max(lost_survivors, missing + discarded)
    reached = max(run.steps[victim], default=0)
    # The leaver's work up to a round's send is kept when that round committed with it among its members:
    # on the leaver itself (a sync it landed), or on the survivors (an overlapped round it sent before it
    # died, whose transfer was done: its own vote is not needed, torchft commits per island).
    synced = [
        e.get("round_step", e["step"])
        for i, events in enumerate(run.island_events)
        for e in events
        if e["change"] == "sync" and (i == victim or victim in e.get("members", []))
    ]
    lost_victim = reached - max(synced, default=0) if mode == "diloco" else 0
    goal = args.quorum_timeout + slowest
    pause = max(pauses)
    lost = lost_survivors + lost_victim
    dropped = max(sum(1 for e in run.island_events[i] if e["change"] == "dropped") for i in survivors)
    return [
        Row(
            f"reclaim ({mode}, island {victim} killed at step {reached}): survivors' longest pause between steps",
            f"{pause:.1f} s",
            f"<= quorum timeout + a step = {args.quorum_timeout:.0f} + {slowest:.1f} s",
            pause <= goal,
        ),
        Row(
            f"reclaim: steps of work lost (leaver's unsynced {lost_victim}, survivors' {lost_survivors}; "
            f"{dropped} sync(s) dropped and retried)",
            f"{lost}",
            f"<= H = {H}" if mode == "diloco" else "<= 1",
            lost <= (H if mode == "diloco" else 1),
        ),
    ]


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    # SIGTERM (and SIGINT, which a shell's background job ignores) end the bench through its cleanup:
    # the ranks, the Lighthouse, the namespaces.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
