"""Serving: `deploy`, `deployments` (`deployments delete|scale`) and `chat` (docs/SERVING.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from starverse import errors
from starverse.amounts import cents
from starverse.cli import common
from starverse.cli.common import EXIT_JOB_FAILED, JsonFlag, app, decimal_text, emit, make_table
from starverse.serving import READY, Deployment

deployments_app = typer.Typer(
    help="Your deployments: list (the default), scale, delete.", invoke_without_command=True, no_args_is_help=False
)
app.add_typer(deployments_app, name="deployments")
app.add_typer(deployments_app, name="deployment", hidden=True)

NameOrId = Annotated[str, typer.Argument(help="The deployment's name or id.")]


def deployments_table(deployments: list[Deployment]) -> Table:
    table = make_table("id", "name", "model", "status", "replicas", "requests", "cost ¥", "¥/M tokens")
    for deployment in deployments:
        ready = sum(replica.serving_state == READY for replica in deployment.replicas)
        table.add_row(
            str(deployment.id),
            deployment.name,
            deployment.model,
            deployment.status,
            f"{ready}/{len(deployment.replicas)} ({deployment.min_replicas}-{deployment.max_replicas})",
            f"{deployment.requests:,}",
            cents(deployment.cost),
            cents(deployment.price_per_million_tokens),
        )
    return table


def how_to_call(deployment: Deployment) -> str:
    """The lines that call it: the CLI's, and curl's with the token from the environment."""
    return (
        f"Endpoint: {deployment.base_url} (model {deployment.name!r}, your API token as the bearer)\n"
        f'  starverse chat {deployment.name} "Hello"\n'
        f'  curl {deployment.base_url}/chat/completions -H "Authorization: Bearer $STARVERSE_API_KEY" '
        f"-H 'Content-Type: application/json' "
        f'-d \'{{"model": "{deployment.name}", "messages": [{{"role": "user", "content": "Hello"}}]}}\''
    )


@app.command()
def deploy(
    job_or_model: Annotated[
        str, typer.Argument(help="A job id (42: its trained model, job:42), model:<id> of yours, or job:<id>.")
    ],
    name: Annotated[str | None, typer.Option(help="What requests name as their model (default: job-42...).")] = None,
    chip: Annotated[str | None, typer.Option(help="A chip type's slug (default: the planner's choice).")] = None,
    max_budget: Annotated[str, typer.Option(help="Hourly budget per replica, in ¥.")] = "28",
    min_replicas: Annotated[int, typer.Option(help="Replicas always up; 0 scales to zero when idle.")] = 1,
    max_replicas: Annotated[int | None, typer.Option(help="At most this many (default: the minimum, or 1).")] = None,
    idle_timeout: Annotated[
        int | None, typer.Option("--idle-timeout", help="Seconds without a request before scaling down.")
    ] = None,
    spot: Annotated[bool, typer.Option(help="Replicas on spot chips at up to --bid.")] = False,
    bid: Annotated[str | None, typer.Option(help="Spot bid, ¥ per chip-hour.")] = None,
    wait: Annotated[bool, typer.Option(help="Wait until a replica answers (not with --min-replicas 0).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Serve a trained model behind the OpenAI-compatible endpoint."""
    if spot and bid is None:
        raise typer.BadParameter("--spot needs --bid (¥ per chip-hour).", param_hint="--bid")
    deployment = common.client().deploy(
        job_or_model,
        name,
        max_budget=decimal_text(max_budget, "--max-budget"),
        chip=chip,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        idle_timeout_s=idle_timeout,
        spot=spot,
        spot_bid=decimal_text(bid, "--bid") if bid is not None else None,
    )
    if wait:
        if not as_json:
            common.err.print(f"Deployment {deployment.name} is {deployment.status}; waiting for a replica...")
        wait_ready(deployment)
    emit(deployment.to_dict(), as_json, deployments_table([deployment]))
    if not as_json:
        common.err.print(how_to_call(deployment), markup=False)


def wait_ready(deployment: Deployment) -> None:
    try:
        deployment.wait_ready()
    except (errors.DeploymentFailed, TimeoutError) as error:
        common.err.print(str(error), markup=False)
        raise typer.Exit(EXIT_JOB_FAILED) from None


@deployments_app.callback()
def deployments_list(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(help="Only deployments with this status.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Your deployments, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    found = common.client().deployments(status=status)
    emit([deployment.to_dict() for deployment in found], as_json, deployments_table(found))


@deployments_app.command("delete")
def deployments_delete(name_or_id: NameOrId, as_json: JsonFlag = False) -> None:
    """Stop a deployment for good: its replicas stop, and their billing with them."""
    deployment = common.client().deployment(name_or_id).delete()
    emit(deployment.to_dict(), as_json, f"Deployment {deployment.id} ({deployment.name}): {deployment.status}.")


@deployments_app.command("scale")
def deployments_scale(
    name_or_id: NameOrId,
    min_replicas: Annotated[int | None, typer.Option(help="Replicas always up (0: scale to zero).")] = None,
    max_replicas: Annotated[int | None, typer.Option(help="At most this many replicas.")] = None,
    idle_timeout: Annotated[
        int | None, typer.Option("--idle-timeout", help="Seconds idle before scaling down.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """New replica bounds or idle timeout; a raised minimum starts replicas now."""
    deployment = common.client().deployment(name_or_id)
    deployment.scale(min_replicas, max_replicas, idle_timeout_s=idle_timeout)
    emit(deployment.to_dict(), as_json, deployments_table([deployment]))


@app.command()
def chat(
    name: Annotated[str, typer.Argument(help="The deployment's name.")],
    message: Annotated[str, typer.Argument(help="What to ask.")],
    system: Annotated[str | None, typer.Option(help="A system message before it.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="The longest answer, in tokens.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    stream: Annotated[bool, typer.Option(help="Print the answer as it comes.")] = True,
    as_json: JsonFlag = False,
) -> None:
    """Ask a deployment one question (a deployment scaled to zero starts a replica first: a cold start)."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": message})
    options = {"max_tokens": max_tokens, "temperature": temperature}
    api = common.client()
    if as_json or not stream:
        reply = api.chat(name, messages, **options)
        if as_json:
            emit(reply.raw, as_json)
        else:
            common.out.print(str(reply), markup=False, highlight=False)
        return
    answer = api.chat(name, messages, stream=True, **options)
    for text in answer:
        common.out.print(text, end="", markup=False, highlight=False)
    common.out.print()
    if answer.usage:
        common.err.print(f"{answer.usage.prompt_tokens} prompt + {answer.usage.completion_tokens} completion tokens")
