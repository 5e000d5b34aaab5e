"""The `starverse` command line: tables for people, `--json` for scripts, exit codes scripts can rely on.

Exit codes:
  0    success
  1    the platform refused or failed (API error, connection error)
  2    bad usage or configuration (missing URL or token, unknown option, bad input)
  3    authentication (wrong, revoked, expired or read-only token)
  4    insufficient credit
  5    the job ended without succeeding (failed, cancelled, stopped for credit)
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from starverse import errors
from starverse.amounts import cents
from starverse.client import Client, create_token
from starverse.config import URL_VARIABLE, config_path, read_file, save_config
from starverse.training import FINISHED, Plan, Run, follow_run, should_cancel

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_AUTH, EXIT_CREDIT, EXIT_JOB_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 5, 130

app = typer.Typer(
    help="Starverse: rent mixed AI accelerators from the terminal.",
    epilog="Exit codes: 0 ok, 1 API error, 2 usage or config error, 3 auth error, 4 insufficient credit, "
    "5 job failed, 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bid_app = typer.Typer(help="Spot bids: create, list, raise, cancel.", no_args_is_help=True)
app.add_typer(bid_app, name="bid")
model_app = typer.Typer(help="Models: upload your own Hugging Face model, list, delete.", no_args_is_help=True)
app.add_typer(model_app, name="model")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
state: dict[str, Any] = {"url": None, "api_key": None}

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


@app.callback()
def options(
    url: Annotated[
        str | None, typer.Option(help=f"Platform URL (default: ${URL_VARIABLE} or the config file).")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="API token (default: $STARVERSE_API_KEY or the config file).")
    ] = None,
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
    "parameters", "size MB",
}  # fmt: skip


# -- login -----------------------------------------------------------------------------------------


@app.command()
def login(
    url: Annotated[str | None, typer.Option(help="Platform URL, e.g. http://127.0.0.1:8000.")] = None,
    username: Annotated[str | None, typer.Option(help="Username or e-mail.")] = None,
    token: Annotated[str | None, typer.Option(help="Use an existing API token instead of a password.")] = None,
) -> None:
    """Sign in and save a token to the config file (readable only by you)."""
    stored = read_file()
    url = (url or state["url"] or stored.get("url") or "").strip() or typer.prompt(
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
    out.print(f"Logged in to {url} as {name}; token saved to {path} (readable only by you).")


def sign_in(url: str, username: str, password: str) -> str:
    """A new token for these credentials; asks for the two-factor code when the platform wants one."""
    try:
        return create_token(url, username, password, name="starverse CLI")["token"]
    except errors.TwoFactorRequired:
        otp = typer.prompt("Two-factor code (authenticator app, or a recovery code)").strip()
        return create_token(url, username, password, name="starverse CLI", otp=otp)["token"]


# -- catalog and account ---------------------------------------------------------------------------


@app.command()
def chips(as_json: JsonFlag = False) -> None:
    """Chip types, prices per chip-hour and free capacity."""
    data = Client(state["url"], state["api_key"], need_key=False).chips()
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
    account = client().account()
    emit(account, as_json, f"{account['username']}: ¥{cents(account['balance'])} ({account['currency']})")


@app.command()
def usage(
    group: Annotated[str, typer.Option(help="job, chip or day.")] = "job",
    since: Annotated[str | None, typer.Option(help="First day, YYYY-MM-DD.")] = None,
    until: Annotated[str | None, typer.Option(help="Last day, YYYY-MM-DD.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Charged usage per job, chip type or day."""
    data = client().usage(group=group, since=since, until=until)
    table = make_table(group, "label", "seconds", "amount ¥", title=f"Total ¥{cents(data['total'])}")
    for row in data["rows"]:
        table.add_row(str(row["key"]), row["label"], str(row["seconds"]), cents(row["amount"]))
    emit(data, as_json, table)


# -- quotes and jobs -------------------------------------------------------------------------------


def job_spec(
    model: str,
    max_budget: str,
    policy: str,
    max_steps: int,
    batch: int,
    dataset: str,
    chip: list[str] | None,
    spot: bool,
    bid: str | None,
    name: str = "",
) -> dict:
    spec: dict[str, Any] = {
        "model": model,
        "max_budget": decimal_text(max_budget, "--max-budget"),
        "policy": policy,
        "max_steps": max_steps,
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
    return spec


def decimal_text(value: str, option: str) -> str:
    try:
        Decimal(value)
    except InvalidOperation:
        raise typer.BadParameter(f"must be a number, e.g. 28 or 2.50 (got {value!r}).", param_hint=option) from None
    return value


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
Steps = Annotated[int, typer.Option(help="Training steps.")]
Batch = Annotated[int, typer.Option("--batch", help="Per-device batch size.")]
Dataset = Annotated[str, typer.Option(help="'synthetic' or 'upload:<id>'.")]
Chips = Annotated[list[str] | None, typer.Option("--chip", help="Pick chips by hand: SLUG=COUNT (repeatable).")]
Spot = Annotated[bool, typer.Option(help="Run on spot chips at up to --bid.")]
BidPrice = Annotated[str | None, typer.Option(help="Spot bid, ¥ per chip-hour.")]


@app.command()
def quote(
    model: Model = "llama-tiny",
    max_budget: Budget = "28",
    policy: PolicyOption = "cost-performance",
    max_steps: Steps = 200,
    batch: Batch = 4,
    dataset: Dataset = "synthetic",
    chip: Chips = None,
    spot: Spot = False,
    bid: BidPrice = None,
    as_json: JsonFlag = False,
) -> None:
    """The plan a job would get now: chips, tokens/s, ¥/h, ETA."""
    plan = client().quote(job_spec(model, max_budget, policy, max_steps, batch, dataset, chip, spot, bid))
    emit(plan, as_json, str(Plan(plan)))


@app.command()
def run(
    model: Model = "llama-tiny",
    max_budget: Budget = "28",
    policy: PolicyOption = "cost-performance",
    max_steps: Steps = 200,
    batch: Batch = 4,
    dataset: Dataset = "synthetic",
    chip: Chips = None,
    spot: Spot = False,
    bid: BidPrice = None,
    name: Annotated[str, typer.Option(help="A name for the job.")] = "",
    follow: Annotated[bool, typer.Option(help="Follow the job with a progress bar until it ends.")] = True,
    as_json: JsonFlag = False,
) -> None:
    """Submit a training job and follow it to the end (exit 5 if it doesn't succeed)."""
    api = client()
    spec = job_spec(model, max_budget, policy, max_steps, batch, dataset, chip, spot, bid, name)
    job = Run(api, api.create_job(spec))
    if not as_json:
        err.print(f"Submitted job {job.id}.")
    if follow:
        try:
            follow_run(job, poll=1.0, progress=not as_json)
        except KeyboardInterrupt:
            if should_cancel(job, "ask"):
                job.cancel().wait(poll=1.0)
                err.print(f"Job {job.id} cancelled.")
            else:
                err.print(f"Job {job.id} keeps running; follow it with `starverse logs -f {job.id}`.")
            raise
    emit(job.data, as_json, str(job))
    if follow and not job.succeeded:
        if not as_json:
            err.print(f"Job {job.id} {job.status}: {job.status_reason}")
        raise typer.Exit(EXIT_JOB_FAILED)


@app.command()
def jobs(
    status: Annotated[str | None, typer.Option(help="Only jobs with this status.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """Your jobs, newest first."""
    data = client().jobs(status=status, limit=limit)
    emit(data, as_json, jobs_table(data, out.width))


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
    data = client().job(job_id)
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
    api = client()
    ended = not follow
    while True:
        lines = api.job_logs(job_id, after=after, limit=1000)
        for line in lines:
            text = json.dumps(line) if as_json else f"[rank {line['rank']}] {line['line']}"
            out.print(text, markup=False, highlight=False)
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
    data = client().cancel_job(job_id)
    emit(data, as_json, f"Job {data['id']}: {data['status']}")


# -- spot bids -------------------------------------------------------------------------------------


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
    data = client().create_bid(job_id, chip, chips_, decimal_text(max_price, "--max-price"))
    emit(data, as_json, bid_table([data]))


@bid_app.command("list")
def bid_list(
    status: Annotated[str | None, typer.Option(help="active, cancelled or closed.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Your bids."""
    data = client().bids(status=status)
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
        data = client().update_bid(bid_id, max_price=decimal_text(max_price, "--max-price"), confirm=confirm)
    emit(data, as_json, bid_table([data]))
    warn(data)


@bid_app.command("cancel")
def bid_cancel(bid_id: int, confirm: Confirm = False, as_json: JsonFlag = False) -> None:
    """Cancel a bid."""
    with confirm_hint():
        data = client().cancel_bid(bid_id, confirm=confirm)
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
        err.print(f"Warning: {warning}", markup=False)


@app.command("bid-advice")
def bid_advice(
    chip: Annotated[str, typer.Argument(help="Chip type slug, e.g. rtx-4090.")],
    bid: Annotated[str | None, typer.Option(help="Your bid, ¥ per chip-hour.")] = None,
    days: Annotated[int | None, typer.Option(help="History window in days (default 7).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """The spot price now, the floor, on-demand, and how long a bid would run uninterrupted (from history)."""
    data = client().bid_advice(chip, None if bid is None else decimal_text(bid, "--bid"), days=days)
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
        out.print(data["summary"], markup=False)
    warn(data)


# -- models ----------------------------------------------------------------------------------------


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
        err.print(f"Uploading {path}; the platform checks the weights and tokenizer before it answers...")
    data = client().upload_model(path, name=name)
    emit(data, as_json, model_table([data]))
    if not as_json:
        err.print(f"Train it with `starverse run --model {data['reference']}`.")


@model_app.command("list")
def model_list(as_json: JsonFlag = False) -> None:
    """The built-in models and your uploads."""
    data = client().models()
    emit(data, as_json, model_table(data))


@model_app.command("download")
def model_download(
    job_id: Annotated[int, typer.Argument(help="The job whose trained model to download.")],
    directory: Annotated[Path, typer.Argument(help="Where to unpack it (created).")],
    merged: Annotated[bool, typer.Option(help="LoRA jobs: the base model with the adapter merged in.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Download a job's model in Hugging Face format (AutoModelForCausalLM.from_pretrained loads it)."""
    folder = client().download_model(job_id, directory, merged=merged)
    files = sorted(path.name for path in folder.iterdir())
    emit({"job": job_id, "path": str(folder), "files": files}, as_json, f"Saved to {folder}: {', '.join(files)}")


@model_app.command("delete")
def model_delete(model_id: int, as_json: JsonFlag = False) -> None:
    """Delete one of your models (refused while a job that hasn't ended trains it)."""
    client().delete_model(model_id)
    emit({"id": model_id, "deleted": True}, as_json, f"Deleted model:{model_id}.")


# -- entry point and exit codes --------------------------------------------------------------------


def exit_code(error: BaseException) -> int:
    if isinstance(error, errors.InsufficientCredit):
        return EXIT_CREDIT
    if isinstance(error, errors.AuthError):
        return EXIT_AUTH
    if isinstance(error, errors.ConfigError):
        return EXIT_USAGE
    return EXIT_API


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and in a console script, exits with) a documented exit code."""
    try:
        result = app(args=argv, standalone_mode=False, prog_name="starverse")
    except (typer.Abort, KeyboardInterrupt):
        err.print("Interrupted.")
        return EXIT_INTERRUPTED
    except typer.Exit as done:
        return done.exit_code
    except errors.StarverseError as error:
        err.print(f"Error ({type(error).__name__}): {error}", markup=False)
        if isinstance(error, errors.AuthError) and not isinstance(error, errors.PermissionDenied):
            err.print(f"Check the token, or run `starverse login` again (config: {config_path()}).", markup=False)
        return exit_code(error)
    except Exception as error:
        if not is_click_error(error):
            raise
        error.show()  # usage errors: unknown option, missing argument, bad value
        return EXIT_USAGE if error.exit_code == EXIT_USAGE else EXIT_API
    return result if isinstance(result, int) else EXIT_OK


def is_click_error(error: Exception) -> bool:
    """Click's (or typer's vendored click's) own errors, which know how to show themselves."""
    return callable(getattr(error, "show", None)) and isinstance(getattr(error, "exit_code", None), int)


__all__ = ["app", "main"]
