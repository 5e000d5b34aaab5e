"""A job's checkpoints and TensorBoard files: `checkpoints JOB`, `checkpoints download JOB STEP -o DIR`,
`checkpoints delete JOB STEP`, `tensorboard JOB -o DIR`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from starverse.cli import common
from starverse.cli.common import JsonFlag, app, emit, make_table
from starverse.objects import Checkpoints


class JobFirstGroup(TyperGroup):
    """`checkpoints 12` lists job 12's checkpoints: a first argument that is a number means `list`."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0].isdigit():
            args = ["list", *args]
        return super().parse_args(ctx, args)


checkpoints_app = typer.Typer(
    cls=JobFirstGroup,
    help="A job's checkpoints: `checkpoints JOB` lists them; download one as a Hugging Face model, delete one.",
    no_args_is_help=True,
)
app.add_typer(checkpoints_app, name="checkpoints")

Job = Annotated[int, typer.Argument(help="The job's id.")]
Step = Annotated[int, typer.Argument(help="The checkpoint's step (`starverse checkpoints JOB` lists them).")]
Output = Annotated[Path, typer.Option("--output", "-o", help="Where to unpack it (created).")]


def checkpoint_table(checkpoints: Checkpoints) -> str:
    table = make_table("step", "loss", "eval loss", "size MB", "kept", "saved")
    for checkpoint in checkpoints:
        table.add_row(
            str(checkpoint.step),
            f"{checkpoint.loss:.4f}" if checkpoint.loss is not None else "-",
            f"{checkpoint.eval_loss:.4f}" if checkpoint.eval_loss is not None else "-",
            f"{checkpoint.size_bytes / 1e6:,.1f}" if checkpoint.size_bytes is not None else "-",
            checkpoint.kept + ("" if checkpoint.deletable else " (in use)"),
            f"{checkpoint.created_at:%Y-%m-%d %H:%M}" if checkpoint.created_at else "",
        )
    return table


@checkpoints_app.command("list")
def checkpoints_list(job_id: Job, as_json: JsonFlag = False) -> None:
    """A job's checkpoints, newest step first, with their losses and why each is kept."""
    checkpoints = common.client().checkpoints(job_id)
    emit(checkpoints.to_dict(), as_json, checkpoint_table(checkpoints))
    if not as_json and checkpoints.retention.get("policy"):
        common.err.print(checkpoints.retention["policy"], markup=False)


@checkpoints_app.command("download")
def checkpoints_download(
    job_id: Job,
    step: Step,
    output: Output = Path("."),
    merged: Annotated[bool, typer.Option(help="LoRA jobs: the merged weights (final and stop checkpoints).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Download a checkpoint as a Hugging Face model (AutoModelForCausalLM.from_pretrained loads it)."""
    folder = common.client().download_checkpoint(job_id, step, output, merged=merged)
    files = sorted(path.name for path in folder.iterdir())
    data = {"job": job_id, "step": step, "path": str(folder), "files": files}
    emit(data, as_json, f"Saved to {folder}: {', '.join(files)}")


@checkpoints_app.command("delete")
def checkpoints_delete(job_id: Job, step: Step, as_json: JsonFlag = False) -> None:
    """Delete a checkpoint (refused for the one a job that has not ended resumes from)."""
    common.client().delete_checkpoint(job_id, step)
    emit({"job": job_id, "step": step, "deleted": True}, as_json, f"Deleted job {job_id}'s checkpoint {step}.")


@app.command()
def tensorboard(job_id: Job, output: Output = Path("."), as_json: JsonFlag = False) -> None:
    """Download a job's TensorBoard event files; view them with `tensorboard --logdir FOLDER`."""
    folder = common.client().download_tensorboard(job_id, output)
    emit({"job": job_id, "path": str(folder)}, as_json, f"Saved to {folder}: tensorboard --logdir {folder}")
