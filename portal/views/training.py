"""The launch page: a job spec, a live quote beside it, and the Train button."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_POST

from base.formatting import cost_phrase, format_duration, format_rate, quote_accuracy, speed_phrase
from billing.services.ledger import balance_of
from billing.services.pricing import current_offers
from fleet.choices import AllocationMode
from fleet.models import ChipType, Job
from kernel import planner
from kernel.money import format_estimate, format_money, seconds_covered
from kernel.spec import JobSpec
from market.services.hints import bid_hints, spot_chip_types
from portal.forms import TrainingForm
from portal.views.quote_lines import on_demand_note, quote_lines
from portal.views.quote_policies import policy_rows
from portal.views.rerun import form_initial
from workers.services.capacity import free_chips, schedulable_nodes
from workers.services.epochs import EpochsRefused, with_epochs
from workers.services.launch import LaunchRefused, fleet_refusal, launch
from workers.services.planning import quote

# What a planning error is called in the quote box, and which field it belongs to at submit.
PROBLEM_TITLES = {
    planner.BudgetTooLow: gettext_lazy("Budget too low"),
    planner.ModelDoesNotFit: gettext_lazy("Model does not fit"),
    planner.NoCapacity: gettext_lazy("No free chips"),
    planner.InvalidRequest: gettext_lazy("Invalid request"),
}


@dataclass(frozen=True)
class ChipLine:
    """Chips of one type in one mode within a plan: "8 × NVIDIA RTX 4090, on-demand"."""

    count: int
    slug: str
    name: str
    mode: str
    simulated: bool


@dataclass(frozen=True)
class PlanSummary:
    """A plan's estimate, formatted for the quote box and the job page."""

    chips: list[ChipLine]
    world_size: int
    zero_stage: int
    global_batch: int
    tokens_per_s: str
    price_per_hour: str
    price_per_million_tokens: str
    eta: str
    total: str
    simulated: bool
    baseline: PlanSummary | None = None
    speedup: str = ""
    cost_ratio: str = ""
    faster: bool = False
    cheaper: bool = False
    steps: int = 0  # the run's steps the estimate counts (0: a stored plan from before steps were kept)

    @property
    def is_baseline(self) -> bool:
        """The plan is itself the best single-chip-type plan (so there is nothing to compare)."""
        return self.baseline is not None and self.baseline.chips == self.chips


@dataclass(frozen=True)
class Problem:
    """Why there is no quote: a title naming the kind of problem and the planner's explanation."""

    title: str
    message: str
    can_queue: bool = False


def chip_lines(plan: planner.Plan, names: dict[str, str]) -> list[ChipLine]:
    simulated = Counter(rank.chip for rank in plan.ranks if rank.simulated)
    modes = dict(AllocationMode.choices)
    return [
        ChipLine(count, slug, names.get(slug, slug), modes.get(mode, mode), simulated[slug] > 0)
        for slug, per_mode in plan.chip_counts.items()
        for mode, count in sorted(per_mode.items())
    ]


def summarize_plan(plan: planner.Plan | None, names: dict[str, str] | None = None) -> PlanSummary | None:
    """A plan (money in micro-units) as the pages show it."""
    if not plan:
        return None
    names = names if names is not None else dict(ChipType.objects.values_list("slug", "name"))
    lines = chip_lines(plan, names)
    baseline = plan.baseline
    speedup, cost_ratio = plan.speedup_vs_baseline, plan.cost_ratio_vs_baseline
    return PlanSummary(
        chips=lines,
        world_size=plan.world_size,
        zero_stage=plan.zero_stage,
        global_batch=plan.global_batch,
        tokens_per_s=format_rate(plan.tokens_per_s),
        price_per_hour=format_estimate(plan.price_per_hour),
        price_per_million_tokens=format_estimate(plan.price_per_million_tokens),
        eta=format_duration(plan.eta_seconds),
        total=format_estimate(plan.total_cost),
        simulated=any(line.simulated for line in lines),
        baseline=summarize_plan(baseline, names) if baseline else None,
        speedup=speed_phrase(speedup),
        cost_ratio=cost_phrase(cost_ratio),
        faster=speedup is not None and speedup >= 1.05,
        cheaper=cost_ratio is not None and cost_ratio < 1,
        steps=plan.steps,
    )


def credit_note(plan: planner.Plan, balance: int) -> str:
    """When the run's estimate is above the balance: how long the balance lasts at the plan's rate, and what then.

    A quote of ¥31,793 against a ¥49 wallet said nothing: the job would launch and be stopped for credit.
    """
    if plan.total_cost <= balance:
        return ""
    lasts = seconds_covered(balance, plan.price_per_hour)
    return gettext(
        "The estimate of %(total)s is above your balance of %(balance)s: at %(rate)s/h it lasts about %(lasts)s, "
        "then the job is checkpointed and stopped for credit."
    ) % {
        "total": format_money(plan.total_cost),
        "balance": format_money(balance),
        "rate": format_money(plan.price_per_hour),
        "lasts": format_duration(lasts),
    }


def problem_of(error: planner.PlanningError) -> Problem:
    title = next((title for kind, title in PROBLEM_TITLES.items() if isinstance(error, kind)), gettext("No plan"))
    return Problem(str(title), str(error), can_queue=isinstance(error, planner.NoCapacity))


def quote_problem(error: planner.PlanningError, spec: JobSpec) -> Problem:
    """Why there is no quote; without free chips, whether the job could still wait for some."""
    never = fleet_refusal(spec) if isinstance(error, planner.NoCapacity) else None
    if never is not None:
        return Problem(never.title or gettext("No capacity"), str(never))
    return problem_of(error)


def free_chips_by_type() -> Counter[str]:
    nodes = list(schedulable_nodes())
    free = free_chips(nodes)
    totals: Counter[str] = Counter()
    for node in nodes:
        totals[node.pool.chip_type.slug] += max(free[node.pk], 0)
    return totals


def launch_context(form: TrainingForm) -> dict:
    free = free_chips_by_type()
    return {
        "form": form,
        "chip_rows": [
            (field, chip, free[chip.slug]) for field, chip in zip(form.chip_fields, form.chip_types, strict=True)
        ],
        "simulation_slowdown": f"{settings.SIMULATION_SLOWDOWN:,.0f}",
    }


@login_required
def train(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        rerun = rerun_of(request)
        chosen = {key: request.GET[key] for key in ("model", "dataset") if key in request.GET}
        initial = form_initial(rerun) if rerun else chosen
        form = TrainingForm(initial=initial, request=request)
        return render(request, "portal/training/train.html", {**launch_context(form), "rerun_of": rerun})
    form = TrainingForm(request.POST, request=request)
    if form.is_valid() and (job := _submit(request, form)):
        # Not "queued": this message stays on the live job page after the job has moved on (its status is live).
        messages.success(request, gettext("Job %(job)s submitted: its status below follows it live.") % {"job": job.pk})
        return redirect("job", job.pk)
    return render(request, "portal/training/train.html", launch_context(form))


def rerun_of(request: HttpRequest) -> Job | None:
    """The job whose settings `?rerun=<id>` asks for: one of the user's (404 otherwise), or None."""
    pk = request.GET.get("rerun")
    if pk is None:
        return None
    if not pk.isascii() or not pk.isdigit() or len(pk) > 18:
        raise Http404(gettext("No such job."))
    return get_object_or_404(Job, pk=int(pk), owner=request.user)


def _submit(request: HttpRequest, form: TrainingForm):
    """Launch as the API does (workers.services.launch); a refusal becomes a form error on its field."""
    try:
        return launch(request.user, form.job_spec())
    except LaunchRefused as error:
        field = error.field if error.field in form.fields else None
        form.add_error(field, f"{error.title}: {error}" if error.title else str(error))
        return None


@require_POST
@login_required
def train_quote(request: HttpRequest) -> HttpResponse:
    """The quote box: the plan the form's job would get now, or what stops it."""
    form = TrainingForm(request.POST, request=request)
    context: dict = {"form": form, "simulation_slowdown": f"{settings.SIMULATION_SLOWDOWN:,.0f}"}
    if form.is_valid():
        spec = form.job_spec()
        offers = {offer.chip.slug: offer for offer in current_offers() if offer.price}
        hinted = list(offers)
        try:
            spec, plan = with_epochs(spec, quote)
        except planner.PlanningError as error:
            context["problem"] = quote_problem(error, spec)
        except EpochsRefused as error:
            context["problem"] = Problem(gettext("Can't count epochs"), str(error))
        else:
            lines = quote_lines(plan, offers)
            context.update(plan=summarize_plan(plan), lines=lines, on_demand_note=on_demand_note(spec, lines, offers))
            context["epochs"] = spec.n_epochs
            context.update(accuracy=quote_accuracy(plan.uncertainty, plan.overhead_seconds), policies=policy_rows(spec))
            context["credit_note"] = credit_note(plan, balance_of(request.user))
            hinted = list(dict.fromkeys(line.slug for line in lines))
        if spec.spot:  # beside the bid field (an out-of-band swap): each chip type's prices and the bid's advice
            spot = spot_chip_types()  # a type that takes no spot bids has no spot price to show
            context["bid_hints"] = bid_hints({slug: spec.spot_bid_per_hour for slug in hinted if slug in spot})
    return render(request, "partials/training/quote.html", context)
