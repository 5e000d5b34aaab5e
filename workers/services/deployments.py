"""Deployments: create, scale (to zero and back), stop; their requests and cost (docs/SERVING.md).

A replica is a job (`Job.deployment`) launched through the one launch path: it is planned, held against the
owner's credit, placed, billed per second, reclaimed and moved as any job is (workers/services/replicas.py:
its launch, its engine, its reports). `scale_deployments` (every few
seconds, from the beat) keeps each live deployment at its wanted number of replicas: its minimum, one
more while requests wait on a busy or cold deployment (up to its maximum), none once it has been idle
for its idle timeout with a minimum of 0. Cancelling a replica stops its billing as it stops any job.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from base.stored_text import StoredText
from billing.models import BillingLine
from fleet.choices import JobStatus, Policy
from fleet.models import ChipType, Deployment, DeploymentStatus, ServedRequest
from kernel.modelspecs import CATALOG
from kernel.money import format_money
from kernel.serving import READY, SERVED_NAME
from workers.services import lifecycle
from workers.services.launch import LaunchRefused, launch_plan
from workers.services.models import ModelUnavailable, resolve_model_source
from workers.services.replicas import LIVE_JOB, DeploymentRefused, launch_replica, live_replicas, refused, replica_spec

log = logging.getLogger(__name__)

MAX_REPLICAS = 8
MAX_IDLE_TIMEOUT_S = 7 * 86400  # the least: settings.SERVING_MIN_IDLE_TIMEOUT_S
# A deployment whose replicas failed this many times in a row, none ever ready in between, fails.
MAX_START_FAILURES = 3
# One more replica (up to the maximum) when more than this many requests wait per ready replica.
BUSY_PER_REPLICA = 4


# -- making and changing -------------------------------------------------------------------------------
def create_deployment(
    owner,
    *,
    name: str,
    model_name: str,
    max_budget_per_hour: int,
    chip: str = "",
    chips_per_replica: int = 1,
    policy: str = Policy.COST_PERFORMANCE,
    total_budget: int | None = None,
    spot: bool = False,
    spot_bid_per_hour: int | None = None,
    min_replicas: int = 1,
    max_replicas: int = 1,
    idle_timeout_s: int = 300,
    max_model_len: int | None = None,
) -> Deployment:
    """Check and make a deployment, then launch its first replicas (its minimum; none for a minimum of 0: the
    first request starts one). A replica the launch refuses (budget, credit, capacity) refuses the whole
    deployment, and nothing is kept."""
    check_name(owner, name)
    check_model(owner, model_name, max_model_len)
    check_replicas(min_replicas, max_replicas, idle_timeout_s)
    if chip and not ChipType.objects.filter(slug=chip).exists():
        raise DeploymentRefused("chip", "invalid", gettext("There is no chip type '%(chip)s'.") % {"chip": chip})
    if total_budget is not None and total_budget <= 0:
        raise DeploymentRefused("total_budget", "invalid", gettext("A total budget must be more than ¥0."))
    with transaction.atomic():
        deployment = Deployment.objects.create(
            owner=owner,
            name=name,
            model_name=model_name.strip(),
            chip=chip,
            chips_per_replica=chips_per_replica,
            policy=policy,
            max_budget_per_hour=max_budget_per_hour,
            total_budget=total_budget,
            spot=spot,
            spot_bid_per_hour=spot_bid_per_hour,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            idle_timeout_s=idle_timeout_s,
            max_model_len=max_model_len,
            status=DeploymentStatus.DEPLOYING if min_replicas else DeploymentStatus.IDLE,
        )
        for _ in range(min_replicas):
            launch_replica(deployment)
        if not min_replicas:  # nothing launched: still refuse now what no replica could ever be placed with
            try:
                launch_plan(replica_spec(deployment))
            except LaunchRefused as error:
                raise refused(error) from None
    return deployment


def check_name(owner, name: str) -> None:
    if not SERVED_NAME.match(name or "") or "/" in name:
        raise DeploymentRefused(
            "name",
            "invalid",
            gettext(
                "A deployment's name is 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit: "
                "requests name it as their `model`."
            ),
        )
    if Deployment.objects.filter(owner=owner, name=name).exclude(status=DeploymentStatus.STOPPED).exists():
        raise DeploymentRefused(
            "name", "name_taken", gettext("You already have a deployment named '%(name)s'.") % {"name": name}
        )


def check_model(owner, model_name: str, max_model_len: int | None = None) -> None:
    """A model that can be served: an upload, a job's output or a cached Hub model (they carry a tokenizer).
    The built-in models read raw bytes and have no tokenizer, so no engine can serve them. `max_model_len`
    may not pass the model's context (the engines refuse to start with it)."""
    name = model_name.strip()
    if name in CATALOG:
        raise DeploymentRefused(
            "model",
            "model_not_servable",
            gettext(
                "'%(name)s' is a built-in model: it reads raw bytes and has no tokenizer, so no serving engine can "
                "load it. Deploy one of your uploaded models (model:<id>), a job's output trained from one "
                "(job:<id>), or a cached Hugging Face model."
            )
            % {"name": name},
        )
    try:
        source = resolve_model_source(name, owner)
    except ModelUnavailable as error:
        raise DeploymentRefused("model", "model_unavailable", str(error)) from None
    context = (source.config or {}).get("max_position_embeddings")
    if max_model_len is not None and isinstance(context, int) and max_model_len > context:
        raise DeploymentRefused(
            "max_model_len",
            "invalid",
            gettext(
                "max_model_len %(asked)s is longer than %(name)s's context (%(context)s tokens): past it, the "
                "model's answers are wrong. Use at most %(context)s."
            )
            % {"asked": max_model_len, "name": name, "context": context},
        )


def check_replicas(min_replicas: int, max_replicas: int, idle_timeout_s: int) -> None:
    if not 1 <= max_replicas <= MAX_REPLICAS:
        raise DeploymentRefused(
            "max_replicas", "invalid", gettext("max_replicas must be 1 to %(most)s.") % {"most": MAX_REPLICAS}
        )
    if not 0 <= min_replicas <= max_replicas:
        raise DeploymentRefused(
            "min_replicas",
            "invalid",
            gettext("min_replicas must be 0 to max_replicas (%(most)s).") % {"most": max_replicas},
        )
    least = settings.SERVING_MIN_IDLE_TIMEOUT_S
    if not least <= idle_timeout_s <= MAX_IDLE_TIMEOUT_S:
        raise DeploymentRefused(
            "idle_timeout_s",
            "invalid",
            gettext("idle_timeout_s must be %(least)s to %(most)s seconds.")
            % {"least": least, "most": MAX_IDLE_TIMEOUT_S},
        )


def update_replicas(
    deployment: Deployment,
    *,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    idle_timeout_s: int | None = None,
) -> Deployment:
    """New replica bounds or idle timeout; the next scaling pass (or this call, for a raised minimum) acts on them."""
    if not deployment.is_live:
        raise DeploymentRefused(
            "non_field_errors",
            "deployment_stopped",
            gettext("Deployment '%(name)s' is stopped.") % {"name": deployment.name},
        )
    new_min = deployment.min_replicas if min_replicas is None else min_replicas
    new_max = deployment.max_replicas if max_replicas is None else max_replicas
    new_idle = deployment.idle_timeout_s if idle_timeout_s is None else idle_timeout_s
    check_replicas(new_min, new_max, new_idle)
    Deployment.objects.filter(pk=deployment.pk).update(
        min_replicas=new_min, max_replicas=new_max, idle_timeout_s=new_idle, updated_at=timezone.now()
    )
    deployment.refresh_from_db()
    scale(deployment, timezone.now())
    deployment.refresh_from_db()
    return deployment


def stop_deployment(
    deployment: Deployment, reason: str | StoredText | None = None, now: datetime | None = None
) -> Deployment:
    """Stop for good: every replica is cancelled (their billing stops as they stop); the name is free again."""
    now = now or timezone.now()
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if deployment.status != DeploymentStatus.STOPPED:
            deployment.status, deployment.stopped_at = DeploymentStatus.STOPPED, now
            deployment.set_status_reason(reason or StoredText(gettext_noop("Deleted by its owner")))
            deployment.save(update_fields=["status", "status_reason", "status_reason_text", "stopped_at", "updated_at"])
    for job in deployment.replicas.filter(LIVE_JOB):
        lifecycle.cancel(job, now)
    return deployment


def wake(deployment: Deployment, now: datetime | None = None) -> None:
    """A request came: note it (the idle clock starts again) and make sure a replica runs or is starting."""
    now = now or timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(last_request_at=now)
    deployment.last_request_at = now
    if deployment.is_live and not live_replicas(deployment).filter(cancel_requested_at__isnull=True).exists():
        scale(deployment, now)


def owned_deployment(user, name: str) -> Deployment | None:
    """The user's live deployment of that name (what a request's `model` names); None: not theirs, or none."""
    return Deployment.objects.filter(owner=user, name=name).exclude(status=DeploymentStatus.STOPPED).first()


def record_request(deployment: Deployment, **fields) -> ServedRequest:
    """One answered request: its row (the page's charts) and the deployment's running totals, in one statement.
    The gateway writes one after every answer, so it costs one round trip and one commit, not two of each, and
    the row and the totals can't disagree."""
    served = ServedRequest(deployment=deployment, **fields)
    values = [field.get_db_prep_save(getattr(served, field.attname), connection) for field in SERVED_FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(RECORD_REQUEST, [*values, deployment.pk])
        served.pk = cursor.fetchone()[0]
    return served


SERVED_FIELDS = [field for field in ServedRequest._meta.concrete_fields if not field.primary_key]
RECORD_REQUEST = """
    WITH served AS (
        INSERT INTO {served} ({columns}) VALUES ({placeholders})
        RETURNING id, prompt_tokens, completion_tokens
    )
    UPDATE {deployments} deployment SET requests = deployment.requests + 1,
        prompt_tokens = deployment.prompt_tokens + served.prompt_tokens,
        completion_tokens = deployment.completion_tokens + served.completion_tokens
    FROM served WHERE deployment.id = %s
    RETURNING served.id
""".format(
    served=ServedRequest._meta.db_table,
    columns=", ".join(connection.ops.quote_name(field.column) for field in SERVED_FIELDS),
    placeholders=", ".join(["%s"] * len(SERVED_FIELDS)),
    deployments=Deployment._meta.db_table,
)


# -- money ----------------------------------------------------------------------------------------------
def deployment_cost(deployment: Deployment) -> int:
    """What the deployment's replicas have been charged so far (micro-units): the meter's billing lines."""
    return BillingLine.objects.filter(job__deployment=deployment).aggregate(total=Sum("charged_total"))["total"] or 0


def price_per_million_tokens(deployment: Deployment, cost: int | None = None) -> int | None:
    """The measured price: cost so far (`cost`, when the caller has it) over the tokens served (prompt and
    completion), per million; None before any token."""
    tokens = deployment.prompt_tokens + deployment.completion_tokens
    if not tokens:
        return None
    return round((deployment_cost(deployment) if cost is None else cost) * 1_000_000 / tokens)


# -- scaling --------------------------------------------------------------------------------------------
def scale_deployments(now: datetime | None = None, inflight: dict[int, int] | None = None) -> dict[str, int]:
    """One scaling pass over the live deployments (the beat's); `inflight`: requests waiting, by deployment."""
    now = now or timezone.now()
    counts = {"launched": 0, "stopped": 0}
    for deployment in Deployment.objects.filter(status__in=DeploymentStatus.live()):
        launched, stopped = scale(deployment, now, (inflight or {}).get(deployment.pk, 0))
        counts["launched"] += launched
        counts["stopped"] += stopped
    return counts


def scale(deployment: Deployment, now: datetime, waiting: int = 0) -> tuple[int, int]:
    """Bring one deployment to its wanted replicas; (launched, cancelled)."""
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if not deployment.is_live:
            return 0, 0
        reason = why_stop(deployment)
    if reason:
        stop_deployment(deployment, reason, now)
        return 0, 0
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if not deployment.is_live:
            return 0, 0
        live = list(live_replicas(deployment).filter(cancel_requested_at__isnull=True))
        ready = [job for job in live if job.status == JobStatus.RUNNING and job.serving.get("state") == READY]
        wanted = wanted_replicas(deployment, now, len(live), len(ready), waiting)
        launched = cancelled = 0
        if len(live) < wanted:
            if too_many_failures(deployment):
                deployment.status = DeploymentStatus.FAILED
                deployment.set_status_reason(failure_reason(deployment))
                deployment.save(update_fields=["status", "status_reason", "status_reason_text", "updated_at"])
                return 0, 0
            for _ in range(wanted - len(live)):
                try:
                    launch_replica(deployment)
                except DeploymentRefused as error:
                    deployment.set_status_reason(
                        StoredText(gettext_noop("A replica could not start: %(error)s"), error=str(error))
                    )
                    deployment.save(update_fields=["status_reason", "status_reason_text", "updated_at"])
                    break
                launched += 1
        # The surplus: replicas not ready yet first, then the newest.
        surplus = sorted(live, key=lambda job: (job in ready, -job.pk))[: max(0, len(live) - wanted)]
        staying_ready = len([job for job in ready if job not in surplus])
        status = status_of(deployment, staying_ready, len(live) + launched - len(surplus))
        if status != deployment.status:
            deployment.status = status
            deployment.save(update_fields=["status", "updated_at"])
    for job in surplus:
        lifecycle.cancel(job, now)
        cancelled += 1
    return launched, cancelled


def wanted_replicas(deployment: Deployment, now: datetime, live: int, ready: int, waiting: int) -> int:
    idle_since = deployment.last_request_at or deployment.created_at
    # Requests in flight (one held through a cold start among them) keep it awake, however long ago they came.
    idle = not waiting and now - idle_since >= timedelta(seconds=deployment.idle_timeout_s)
    if idle:
        return deployment.min_replicas
    wanted = max(deployment.min_replicas, 1, live)
    if ready and waiting > BUSY_PER_REPLICA * ready and live == ready:
        wanted = live + 1
    return min(wanted, deployment.max_replicas)


def status_of(deployment: Deployment, ready: int, replicas: int) -> str:
    if ready:
        return DeploymentStatus.READY
    return DeploymentStatus.DEPLOYING if replicas else DeploymentStatus.IDLE


def why_stop(deployment: Deployment) -> str | StoredText:
    """Why the deployment must stop now ("" : it may go on): its total budget spent, or its owner out of credit."""
    if deployment.total_budget is not None and deployment_cost(deployment) >= deployment.total_budget:
        spent = gettext_noop("Its total budget of %(budget)s is spent.")
        return StoredText(spent, budget=format_money(deployment.total_budget))
    if deployment.replicas.filter(status=JobStatus.STOPPED_NO_CREDIT).exists():
        return StoredText(gettext_noop("Stopped: out of credit. Top up, then deploy again."))
    return ""


def too_many_failures(deployment: Deployment) -> bool:
    last = list(deployment.replicas.filter(~LIVE_JOB).order_by("-pk")[:MAX_START_FAILURES])
    return len(last) == MAX_START_FAILURES and all(
        job.status == JobStatus.FAILED and job.serving.get("state") != READY for job in last
    )


def failure_reason(deployment: Deployment) -> StoredText:
    last = deployment.replicas.filter(status=JobStatus.FAILED).order_by("-pk").first()
    detail = (last.serving.get("error") or last.stored_reason()) if last else ""
    if isinstance(detail, str):
        detail = detail.rstrip()
    if not detail:
        return StoredText(
            gettext_noop("%(count)s replicas in a row failed to start. The last:"), count=MAX_START_FAILURES
        )
    failed = gettext_noop("%(count)s replicas in a row failed to start. The last: %(detail)s")
    return StoredText(failed, count=MAX_START_FAILURES, detail=detail)
