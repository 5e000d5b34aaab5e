"""What every command group of the CLI shares: the app, the consoles, the global options and the output helpers.

Commands reach `client()`, `out`, `err` and `state` through this module (`common.client()`), so that a test
can swap them in one place.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from starverse.client import Client
from starverse.config import URL_VARIABLE
from starverse.version import VERSION

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_AUTH, EXIT_CREDIT, EXIT_JOB_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 5, 130

app = typer.Typer(
    help="Starverse: rent mixed AI accelerators from the terminal.",
    epilog="Exit codes: 0 ok, 1 API error, 2 usage or config error, 3 auth error, 4 insufficient credit, "
    "5 job failed, 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion (bash, zsh, fish, PowerShell; the shell is detected) and --show-completion
    add_completion=True,
)

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
state: dict[str, Any] = {"url": None, "api_key": None}

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def show_version(value: bool) -> None:
    if value:
        out.print(f"starverse {VERSION}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def options(
    url: Annotated[
        str | None, typer.Option(help=f"Platform URL (default: ${URL_VARIABLE} or the config file).")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="API token (default: $STARVERSE_API_KEY or the config file).")
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Print the installed version."),
    ] = False,
) -> None:
    state.update(url=url, api_key=api_key)


def client() -> Client:
    return Client(state["url"], state["api_key"])


def emit(data: Any, as_json: bool, table: Table | str | None = None) -> None:
    if as_json or table is None:
        out.print_json(json.dumps(data, default=str))
    else:
        out.print(table)


def make_table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="right" if column in NUMERIC else "left")
    return table


NUMERIC = {
    "id", "chips", "memory GiB", "on-demand ¥/h", "spot ¥/h", "step", "loss", "cost ¥", "amount ¥", "seconds",
    "parameters", "size MB", "replicas", "requests", "¥/M tokens",
}  # fmt: skip


def decimal_text(value: str, option: str) -> str:
    try:
        Decimal(value)
    except InvalidOperation:
        raise typer.BadParameter(f"must be a number, e.g. 28 or 2.50 (got {value!r}).", param_hint=option) from None
    return value
