"""What the deployment page shows: its replicas (simulated ones labelled), counters, cost, endpoint snippets and
the replicas' recent log lines (docs/SERVING.md, "Pages")."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from base.formatting import format_duration, format_rate
from billing.models import BillingLine
from fleet.choices import JobStatus
from fleet.models import ChipType, Deployment, Job
from workers.models import JobLogLine
from workers.services.deployments import deployment_cost, price_per_million_tokens

RECENT_ENDED = 5  # ended replicas shown under the live ones
LOG_LINES = 200
ENGINE_STATES = {
    "queued": _("waiting for chips"),
    "starting": _("starting"),
    "ready": _("ready"),
    "failed": _("failed"),
    "stopped": _("stopped"),
}


@dataclass(frozen=True)
class ReplicaRow:
    """One replica: its job, its engine's state, where it runs."""

    job_id: int
    status: str
    status_key: str
    state: str
    engine: str
    chip: str
    hostname: str
    device: str
    simulated: bool
    error: str
    live: bool


def replica_row(job: Job, names: dict[str, str]) -> ReplicaRow:
    serving = job.serving or {}
    rank = job.plan.ranks[0] if job.plan and job.plan.ranks else None
    state = serving.get("state") or "queued"
    return ReplicaRow(
        job_id=job.pk,
        status=job.get_status_display(),
        status_key=job.status,
        state=ENGINE_STATES.get(state, state),
        engine=serving.get("engine") or "—",
        chip=names.get(rank.chip, rank.chip) if rank else "—",
        hostname=rank.hostname if rank else "—",
        device=serving.get("device") or "",
        simulated=bool(serving.get("simulated")) or bool(rank and rank.simulated),
        error=serving.get("error") or (job.reason_text if job.status == JobStatus.FAILED else ""),
        live=job.status not in JobStatus.finished(),
    )


def replica_rows(deployment: Deployment) -> list[ReplicaRow]:
    """Its live replicas, then the few that ended last."""
    names = dict(ChipType.objects.values_list("slug", "name"))
    jobs = deployment.replicas.order_by("-pk")
    live = [job for job in jobs.exclude(status__in=JobStatus.finished())]
    ended = list(jobs.filter(status__in=JobStatus.finished())[:RECENT_ENDED])
    return [replica_row(job, names) for job in [*live, *ended]]


def recent_log_lines(deployment: Deployment) -> list[JobLogLine]:
    """The replicas' newest log lines, oldest first."""
    lines = JobLogLine.objects.filter(job__deployment=deployment).order_by("-created_at", "-id")[:LOG_LINES]
    return list(reversed(lines))


def endpoint(request: HttpRequest, deployment: Deployment) -> dict:
    """The OpenAI-compatible base URL and the lines that call it (a token from the tokens page)."""
    base = request.build_absolute_uri("/v1")
    curl = "\n".join(
        [
            f"curl {base}/chat/completions \\",
            '  -H "Authorization: Bearer $STARVERSE_TOKEN" \\',
            '  -H "Content-Type: application/json" \\',
            f'  -d \'{{"model": "{deployment.name}", "messages": [{{"role": "user", "content": "Hello"}}]}}\'',
        ]
    )
    python = "\n".join(
        [
            "import os",
            "from openai import OpenAI",
            "",
            f'client = OpenAI(base_url="{base}", api_key=os.environ["STARVERSE_TOKEN"])',
            "answer = client.chat.completions.create(",
            f'    model="{deployment.name}", messages=[{{"role": "user", "content": "Hello"}}]',
            ")",
            "print(answer.choices[0].message.content)",
        ]
    )
    return {"base": base, "curl": curl, "python": python}


def deployment_context(deployment: Deployment) -> dict:
    """The live part of the page: status, counters, cost, replicas and logs."""
    cost = deployment_cost(deployment)
    return {
        "deployment": deployment,
        "live": deployment.is_live,
        "replicas": replica_rows(deployment),
        "cost": cost,
        "price_per_million": price_per_million_tokens(deployment, cost),
        "tokens": format_rate(deployment.prompt_tokens + deployment.completion_tokens),
        "idle_timeout": format_duration(deployment.idle_timeout_s),
        "log_lines": recent_log_lines(deployment),
    }


def owner_deployments(user):
    """The user's deployments, each with its live replicas and cost so far counted in the query."""
    cost = (
        BillingLine.objects.filter(job__deployment=OuterRef("pk"))
        .values("job__deployment")
        .annotate(total=Sum("charged_total"))
        .values("total")
    )
    live = Count("replicas", filter=~Q(replicas__status__in=JobStatus.finished()))
    return Deployment.objects.filter(owner=user).annotate(live_replicas=live, cost=Coalesce(Subquery(cost), 0))
