"""Spot bids: `bid create|list|raise|cancel`, and `bid-advice`."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Annotated

import typer
from rich.table import Table

from starverse import errors
from starverse.cli import common
from starverse.cli.common import JsonFlag, app, decimal_text, emit, make_table

bid_app = typer.Typer(help="Spot bids: create, list, raise, cancel.", no_args_is_help=True)
app.add_typer(bid_app, name="bid")


def bid_table(bids: list[dict]) -> Table:
    table = make_table("id", "job", "chip", "chips", "max ¥/h", "status", "won", "clearing ¥/h")
    for bid in bids:
        table.add_row(
            str(bid["id"]),
            str(bid["job"]),
            bid["chip"],
            str(bid["chips"]),
            str(bid["max_price"]),
            bid["status"],
            str(bid.get("won_chips") or 0),
            str(bid.get("clearing_price") or "-"),
        )
    return table


Confirm = Annotated[
    bool, typer.Option("--confirm", help="Go ahead even though it moves the bid's running job off its chips.")
]


@bid_app.command("create")
def bid_create(
    job_id: Annotated[int, typer.Option("--job", help="The spot job this bid is for.")],
    chip: Annotated[str, typer.Option(help="Chip type slug.")],
    max_price: Annotated[str, typer.Option(help="The most you pay, ¥ per chip-hour.")],
    chips_: Annotated[int, typer.Option("--chips", help="How many chips.")] = 1,
    as_json: JsonFlag = False,
) -> None:
    """Bid for spot chips for a job."""
    data = common.client().create_bid(job_id, chip, chips_, decimal_text(max_price, "--max-price"))
    emit(data, as_json, bid_table([data]))


@bid_app.command("list")
def bid_list(
    status: Annotated[str | None, typer.Option(help="active, cancelled or closed.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Your bids."""
    data = common.client().bids(status=status)
    emit(data, as_json, bid_table(data))


@bid_app.command("raise")
def bid_raise(
    bid_id: int,
    max_price: Annotated[str, typer.Option(help="The new most you pay, ¥ per chip-hour.")],
    confirm: Confirm = False,
    as_json: JsonFlag = False,
) -> None:
    """Change a bid's price (raise it to win chips at a higher clearing price, or lower it)."""
    with confirm_hint():
        data = common.client().update_bid(bid_id, max_price=decimal_text(max_price, "--max-price"), confirm=confirm)
    emit(data, as_json, bid_table([data]))
    warn(data)


@bid_app.command("cancel")
def bid_cancel(bid_id: int, confirm: Confirm = False, as_json: JsonFlag = False) -> None:
    """Cancel a bid."""
    with confirm_hint():
        data = common.client().cancel_bid(bid_id, confirm=confirm)
    emit(data, as_json, bid_table([data]))


@contextmanager
def confirm_hint():
    """A change that would move a running job: the platform's words, with the CLI's way to go ahead."""
    try:
        yield
    except errors.MoveNotConfirmed as error:
        message = error.message.replace("Send confirm=true to go ahead.", "Run it again with --confirm to go ahead.")
        raise errors.MoveNotConfirmed(message, status=error.status, body=error.body) from None


def warn(data: dict) -> None:
    """What the platform accepted but flagged (a bid above on-demand), on stderr so --json stays clean."""
    for warning in data.get("warnings") or []:
        common.err.print(f"Warning: {warning}", markup=False)


@app.command("bid-advice")
def bid_advice(
    chip: Annotated[str, typer.Argument(help="Chip type slug, e.g. rtx-4090.")],
    bid: Annotated[str | None, typer.Option(help="Your bid, ¥ per chip-hour.")] = None,
    days: Annotated[int | None, typer.Option(help="History window in days (default 7).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """The spot price now, the floor, on-demand, and how long a bid would run uninterrupted (from history)."""
    data = common.client().bid_advice(chip, None if bid is None else decimal_text(bid, "--bid"), days=days)
    table = make_table("chip", "bid", "spot now", "floor", "on-demand", "expected h", "winning", "history h")
    share = data.get("winning_share")
    hours = data.get("expected_hours")
    table.add_row(
        data["chip"],
        str(data.get("bid") or "-"),
        str(data.get("spot_price") or "-"),
        str(data.get("floor") or "-"),
        str(data.get("on_demand_price") or "-"),
        "-" if hours is None else f"{hours:.1f}",
        "-" if share is None else f"{share:.0%}",
        f"{data.get('history_hours') or 0:.1f}",
    )
    emit(data, as_json, table)
    if not as_json:
        common.out.print(data["summary"], markup=False)
    warn(data)
