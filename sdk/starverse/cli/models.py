"""Models: `model upload|list|download|delete`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from starverse.cli import common
from starverse.cli.common import JsonFlag, app, emit, make_table

model_app = typer.Typer(help="Models: upload your own Hugging Face model, list, delete.", no_args_is_help=True)
app.add_typer(model_app, name="model")


def model_table(models: list[dict]) -> Table:
    table = make_table("reference", "name", "source", "architecture", "parameters", "size MB")
    for model in models:
        size = model.get("size_bytes")
        table.add_row(
            model["reference"],
            model["name"],
            model["source"],
            model["architecture"],
            f"{model['parameters']:,}",
            f"{size / 1e6:,.1f}" if size is not None else "-",
        )
    return table


@model_app.command("upload")
def model_upload(
    path: Annotated[
        Path,
        typer.Argument(
            exists=True, help="The model folder (config.json, safetensors weights, tokenizer) or an archive of it."
        ),
    ],
    name: Annotated[str | None, typer.Option(help="A name for it (default: the folder's).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Upload a Hugging Face model; train it by the reference it prints (model:<id>)."""
    if not as_json:
        common.err.print(f"Uploading {path}; the platform checks the weights and tokenizer before it answers...")
    data = common.client().upload_model(path, name=name)
    emit(data, as_json, model_table([data]))
    if not as_json:
        common.err.print(f"Train it with `starverse run --model {data['reference']}`.")


@model_app.command("list")
def model_list(as_json: JsonFlag = False) -> None:
    """The built-in models and your uploads."""
    data = common.client().models()
    emit(data, as_json, model_table(data))


@model_app.command("download")
def model_download(
    job_id: Annotated[int, typer.Argument(help="The job whose trained model to download.")],
    directory: Annotated[Path, typer.Argument(help="Where to unpack it (created).")],
    merged: Annotated[bool, typer.Option(help="LoRA jobs: the base model with the adapter merged in.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Download a job's model in Hugging Face format (AutoModelForCausalLM.from_pretrained loads it)."""
    folder = common.client().download_model(job_id, directory, merged=merged)
    files = sorted(path.name for path in folder.iterdir())
    emit({"job": job_id, "path": str(folder), "files": files}, as_json, f"Saved to {folder}: {', '.join(files)}")


@model_app.command("delete")
def model_delete(model_id: int, as_json: JsonFlag = False) -> None:
    """Delete one of your models (refused while a job that hasn't ended trains it)."""
    common.client().delete_model(model_id)
    emit({"id": model_id, "deleted": True}, as_json, f"Deleted model:{model_id}.")
