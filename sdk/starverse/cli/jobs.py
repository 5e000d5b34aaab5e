"""Quotes and jobs: `quote`, `run`, `jobs`, `job`, `logs`, `cancel`, `continue`."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from starverse.amounts import cents
from starverse.cli import common
from starverse.cli import training_options as t
from starverse.cli.common import EXIT_JOB_FAILED, NUMERIC, JsonFlag, app, decimal_text, emit
from starverse.training import FINISHED, Plan, Run, follow_run, should_cancel


def job_spec(
    model: str,
    max_budget: str,
    policy: str,
    training: dict,
    batch: int,
    dataset: str,
    chip: list[str] | None,
    spot: bool,
    bid: str | None,
    name: str = "",
    sync_mode: str = "",
    sync_every: int | None = None,
) -> dict:
    """The job spec the options make; `training` is `max_steps` or `n_epochs`, and `hyperparameters`."""
    spec: dict[str, Any] = {
        "model": model,
        "max_budget": decimal_text(max_budget, "--max-budget"),
        "policy": policy,
        **training,
        "per_device_batch_size": batch,
        "dataset": dataset,
    }
    if name:
        spec["name"] = name
    if chip:
        spec["chip_counts"] = parse_chip_counts(chip)
    if spot:
        spec["spot"] = True
        if bid is None:
            raise typer.BadParameter("--spot needs --bid (¥ per chip-hour).", param_hint="--bid")
        spec["bid"] = decimal_text(bid, "--bid")
    if sync_mode:
        spec["sync_mode"] = sync_mode
    if sync_every is not None:
        spec["sync_every"] = sync_every
    return spec


def parse_chip_counts(items: list[str]) -> dict[str, int]:
    counts = {}
    for item in items:
        slug, _, count = item.partition("=")
        if not slug or not count.isdigit():
            raise typer.BadParameter(f"takes SLUG=COUNT, e.g. rtx-4090=2 (got {item!r}).", param_hint="--chip")
        counts[slug] = int(count)
    return counts


Model = Annotated[
    str, typer.Option(help="llama-tiny, llama-2-7b, llama-2-13b, llama-2-70b, or model:<id> of yours (`model list`).")
]
Budget = Annotated[str, typer.Option(help="Hourly budget in ¥.")]
PolicyOption = Annotated[str, typer.Option(help="cost-performance, fastest, cheapest or single-type.")]
Batch = Annotated[int, typer.Option("--batch", help="Per-device batch size.")]
Dataset = Annotated[str, typer.Option(help="'synthetic' or 'upload:<id>'.")]
Chips = Annotated[list[str] | None, typer.Option("--chip", help="Pick chips by hand: SLUG=COUNT (repeatable).")]
Spot = Annotated[bool, typer.Option(help="Run on spot chips at up to --bid.")]
BidPrice = Annotated[str | None, typer.Option(help="Spot bid, ¥ per chip-hour.")]
SyncMode = Annotated[
    str, typer.Option(help="Chips of several stacks (islands): 'step' (exact) or 'diloco'; blank: the planner's.")
]
SyncEvery = Annotated[int | None, typer.Option(help="diloco: inner steps between the islands' syncs (H).")]


@app.command()
@t.training_options
def quote(
    model: Model = "llama-tiny",
    max_budget: Budget = "28",
    policy: PolicyOption = "cost-performance",
    batch: Batch = 4,
    dataset: Dataset = "synthetic",
    chip: Chips = None,
    spot: Spot = False,
    bid: BidPrice = None,
    sync_mode: SyncMode = "",
    sync_every: SyncEvery = None,
    training: dict | None = None,
    as_json: JsonFlag = False,
) -> None:
    """The plan a job would get now: chips, islands, steps, tokens/s, ¥/h, ETA."""
    spec = job_spec(
        model, max_budget, policy, training or {}, batch, dataset, chip, spot, bid,
        sync_mode=sync_mode, sync_every=sync_every,
    )  # fmt: skip
    plan = common.client().quote(spec)
    emit(plan, as_json, str(Plan(plan)))


@app.command()
@t.training_options
def run(
    model: Model = "llama-tiny",
    max_budget: Budget = "28",
    policy: PolicyOption = "cost-performance",
    batch: Batch = 4,
    dataset: Dataset = "synthetic",
    chip: Chips = None,
    spot: Spot = False,
    bid: BidPrice = None,
    name: Annotated[str, typer.Option(help="A name for the job.")] = "",
    sync_mode: SyncMode = "",
    sync_every: SyncEvery = None,
    training: dict | None = None,
    follow: Annotated[bool, typer.Option(help="Follow the job with a progress bar until it ends.")] = True,
    as_json: JsonFlag = False,
) -> None:
    """Submit a training job and follow it to the end (exit 5 if it doesn't succeed)."""
    spec = job_spec(
        model, max_budget, policy, training or {}, batch, dataset, chip, spot, bid, name, sync_mode, sync_every
    )  # fmt: skip
    api = common.client()
    job = Run(api, api.create_job(spec))
    if not as_json:
        common.err.print(f"Submitted job {job.id}.")
    if follow:
        try:
            follow_run(job, poll=1.0, progress=not as_json)
        except KeyboardInterrupt:
            if should_cancel(job, "ask"):
                job.cancel().wait(poll=1.0)
                common.err.print(f"Job {job.id} cancelled.")
            else:
                common.err.print(f"Job {job.id} keeps running; follow it with `starverse logs -f {job.id}`.")
            raise
    emit(job.data, as_json, str(job))
    if follow and not job.succeeded:
        if not as_json:
            common.err.print(f"Job {job.id} {job.status}: {job.status_reason}")
        raise typer.Exit(EXIT_JOB_FAILED)


@app.command()
def jobs(
    status: Annotated[str | None, typer.Option(help="Only jobs with this status.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """Your jobs, newest first."""
    data = common.client().jobs(status=status, limit=limit)
    emit(data, as_json, jobs_table(data, common.out.width))


JOB_COLUMNS = ("id", "name", "model", "status", "step", "loss", "cost ¥")  # newest first; --json has created_at
GAP = 2  # between two columns: the box's blank divider and one space of padding


def jobs_table(jobs: list[dict], width: int) -> Table:
    """One line a job within `width` columns (80 too): the name and the model share what the other columns leave,
    cut with "…"."""
    rows = [job_row(job) for job in jobs]
    fixed = [i for i, column in enumerate(JOB_COLUMNS) if column not in ("name", "model")]
    used = sum(max([len(JOB_COLUMNS[i]), *(len(row[i]) for row in rows)]) for i in fixed) + GAP * (len(JOB_COLUMNS) - 1)
    name_width = max(4, (width - used) * 3 // 5)
    model_width = max(4, width - used - name_width)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for column in JOB_COLUMNS:
        table.add_column(column, justify="right" if column in NUMERIC else "left", no_wrap=True)
    for row in rows:
        row[1], row[2] = clip(row[1], name_width), clip(row[2], model_width)
        table.add_row(*row)
    return table


def job_row(job: dict) -> list[str]:
    loss = f"{job['loss']:.4f}" if isinstance(job.get("loss"), int | float) else "-"
    step = f"{job.get('step') or 0}/{job['max_steps']}"
    return [
        str(job["id"]),
        job.get("name") or "",
        job["model"],
        job["status"],
        step,
        loss,
        cents(job.get("cost")),
    ]


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@app.command()
def job(job_id: int, as_json: JsonFlag = False) -> None:
    """One job: status, progress, loss, cost, plan."""
    data = common.client().job(job_id)
    run_ = Run(None, data)  # type: ignore[arg-type]
    text = str(run_) + (f"\n{run_.plan}" if run_.plan else "")
    emit(data, as_json, text)


@app.command()
def logs(
    job_id: int,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")] = False,
    after: Annotated[int, typer.Option(help="Only lines after this id.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Log lines of a job's ranks; -f follows them until the job ends."""
    api = common.client()
    ended = not follow
    while True:
        lines = api.job_logs(job_id, after=after, limit=1000)
        for line in lines:
            text = json.dumps(line) if as_json else f"[rank {line['rank']}] {line['line']}"
            common.out.print(text, markup=False, highlight=False)
            after = line["id"]
        if len(lines) == 1000:
            continue  # more are waiting
        if ended:
            return
        ended = api.job(job_id)["status"] in FINISHED  # one more read after the end catches the last lines
        if not ended:
            time.sleep(1.0)


@app.command()
def cancel(job_id: int, as_json: JsonFlag = False) -> None:
    """Cancel a job (a running one stops within seconds)."""
    data = common.client().cancel_job(job_id)
    emit(data, as_json, f"Job {data['id']}: {data['status']}")


@app.command("continue")
def continue_(
    job_id: int,
    steps: Annotated[int | None, typer.Option("--steps", help="Train this many steps past the checkpoint.")] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Or the new total (default: the old job's, if not reached).")
    ] = None,
    checkpoint: Annotated[
        int | None, typer.Option("--checkpoint", help="The step of the checkpoint to start from (default: the last).")
    ] = None,
    max_budget: Annotated[str | None, typer.Option(help="A new hourly budget (default: the old job's).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Continue a finished job from one of its checkpoints, as a new job linked to it."""
    changes = {"max_budget": decimal_text(max_budget, "--max-budget")} if max_budget is not None else {}
    data = common.client().continue_job(
        job_id, checkpoint_step=checkpoint, max_steps=max_steps, additional_steps=steps, **changes
    )
    text = (
        f"Job {data['id']} continues job {job_id} from step {data.get('start_checkpoint_step')} "
        f"to step {data['max_steps']}: {data['status']}"
    )
    emit(data, as_json, text)
