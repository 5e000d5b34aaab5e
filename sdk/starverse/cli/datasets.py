"""Datasets: `datasets upload|list|delete` (`dataset` works too)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from starverse.cli import common
from starverse.cli.common import JsonFlag, app, emit, make_table
from starverse.objects import Dataset

datasets_app = typer.Typer(
    help="Datasets: upload a text or JSONL file to train on, list, delete.", no_args_is_help=True
)
app.add_typer(datasets_app, name="datasets")
app.add_typer(datasets_app, name="dataset", hidden=True)


def dataset_table(datasets: list[Dataset]) -> Table:
    table = make_table("reference", "name", "kind", "samples", "size MB", "created")
    for dataset in datasets:
        size = dataset.size_bytes
        table.add_row(
            dataset.reference,
            dataset.name,
            dataset.kind,
            f"{dataset.samples:,}" if dataset.samples is not None else "-",
            f"{size / 1e6:,.2f}" if size is not None else "-",
            f"{dataset.created_at:%Y-%m-%d %H:%M}" if dataset.created_at else "",
        )
    return table


@datasets_app.command("upload")
def datasets_upload(
    path: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help='A text file or JSONL: {"text"}, chat {"messages"} or {"prompt", "completion"} records.',
        ),
    ],
    name: Annotated[str | None, typer.Option(help="A name for it (default: the file's).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Upload a dataset; train on it by the reference it prints (upload:<id>)."""
    dataset = common.client().upload_dataset(path, name=name)
    emit(dataset.to_dict(), as_json, dataset_table([dataset]))
    if not as_json:
        common.err.print(f"Train on it with `starverse run --dataset {dataset.reference} --epochs 1`.")


@datasets_app.command("list")
def datasets_list(as_json: JsonFlag = False) -> None:
    """Your datasets."""
    datasets = common.client().datasets()
    emit([dataset.to_dict() for dataset in datasets], as_json, dataset_table(datasets))


@datasets_app.command("delete")
def datasets_delete(
    dataset_id: Annotated[int, typer.Argument(help="Its id (upload:<id>).")], as_json: JsonFlag = False
) -> None:
    """Delete one of your datasets (refused while a job uses it)."""
    common.client().delete_dataset(dataset_id)
    emit({"id": dataset_id, "deleted": True}, as_json, f"Deleted upload:{dataset_id}.")
