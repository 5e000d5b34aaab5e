"""Signing in, and what the account sees: `login`, `chips`, `balance`, `usage`."""

from __future__ import annotations

from typing import Annotated

import typer

from starverse import errors
from starverse.amounts import cents
from starverse.cli import common
from starverse.cli.common import JsonFlag, app, emit, make_table
from starverse.client import Client, create_token
from starverse.config import read_file, save_config


@app.command()
def login(
    url: Annotated[str | None, typer.Option(help="Platform URL, e.g. http://127.0.0.1:8000.")] = None,
    username: Annotated[str | None, typer.Option(help="Username or e-mail.")] = None,
    token: Annotated[str | None, typer.Option(help="Use an existing API token instead of a password.")] = None,
) -> None:
    """Sign in and save a token to the config file (readable only by you)."""
    stored = read_file()
    url = (url or common.state["url"] or stored.get("url") or "").strip() or typer.prompt(
        "Starverse URL", default="http://127.0.0.1:8000"
    )
    url = url.rstrip("/")
    if token:
        account = Client(url, token).account()
        name = account["username"]
    else:
        username = username or typer.prompt("Username or e-mail", default=stored.get("username") or None)
        password = typer.prompt("Password", hide_input=True)
        token, name = sign_in(url, username, password), username
    path = save_config(url, token, username=name)
    common.out.print(f"Logged in to {url} as {name}; token saved to {path} (readable only by you).")


def sign_in(url: str, username: str, password: str) -> str:
    """A new token for these credentials; asks for the two-factor code when the platform wants one."""
    try:
        return create_token(url, username, password, name="starverse CLI")["token"]
    except errors.TwoFactorRequired:
        otp = typer.prompt("Two-factor code (authenticator app, or a recovery code)").strip()
        return create_token(url, username, password, name="starverse CLI", otp=otp)["token"]


@app.command()
def chips(as_json: JsonFlag = False) -> None:
    """Chip types, prices per chip-hour and free capacity."""
    data = Client(common.state["url"], common.state["api_key"], need_key=False).chips()
    table = make_table("chip", "name", "memory GiB", "on-demand ¥/h", "spot ¥/h", "chips")
    for chip in data:
        table.add_row(
            chip["slug"],
            chip["name"],
            str(chip["memory_gib"]),
            chip["on_demand_price"] or "-",
            chip.get("spot_price") or "-",
            str(chip.get("capacity", "")),
        )
    emit(data, as_json, table)


@app.command()
def balance(as_json: JsonFlag = False) -> None:
    """Your balance."""
    account = common.client().account()
    emit(account, as_json, f"{account['username']}: ¥{cents(account['balance'])} ({account['currency']})")


@app.command()
def usage(
    group: Annotated[str, typer.Option(help="job, chip or day.")] = "job",
    since: Annotated[str | None, typer.Option(help="First day, YYYY-MM-DD.")] = None,
    until: Annotated[str | None, typer.Option(help="Last day, YYYY-MM-DD.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Charged usage per job, chip type or day."""
    data = common.client().usage(group=group, since=since, until=until)
    table = make_table(group, "label", "seconds", "amount ¥", title=f"Total ¥{cents(data['total'])}")
    for row in data["rows"]:
        table.add_row(str(row["key"]), row["label"], str(row["seconds"]), cents(row["amount"]))
    emit(data, as_json, table)
