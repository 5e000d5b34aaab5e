"""What each planning policy would pick for the job in the quote box, side by side.

Each policy minimises what its help text says (kernel.planner.evaluate.objective_value); showing
the others' plans beside the chosen one lets a user see what it traded: a faster mix for a higher
price per token, or the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy

from base.formatting import format_chip_counts
from fleet.choices import Policy
from kernel import planner
from kernel.money import format_estimate
from kernel.spec import JobSpec
from workers.services.planning import policy_alternatives

# What each policy minimises, in the words the rows use.
GOALS = {
    "cost-performance": gettext_lazy("¥ per token × seconds per token"),
    "fastest": gettext_lazy("seconds per token (most tokens/s)"),
    "cheapest": gettext_lazy("¥ per token"),
    "single-type": gettext_lazy("cost-performance on one chip type"),
}


@dataclass(frozen=True)
class PolicyRow:
    policy: str
    label: str
    goal: str
    chips: str
    tokens_per_s: str
    price_per_hour: str
    price_per_million_tokens: str
    chosen: bool
    same_as: str = ""


def policy_rows(spec: JobSpec) -> list[PolicyRow]:
    """One row per policy that finds a plan; plans equal to an earlier row's say so."""
    labels = dict(Policy.choices)
    rows: list[PolicyRow] = []
    seen: dict[tuple, str] = {}
    for policy, plan in policy_alternatives(spec).items():
        if plan is None:
            continue
        key = _mix(plan)
        rows.append(
            PolicyRow(
                policy=policy,
                label=labels.get(policy, policy),
                goal=GOALS[policy],
                chips=format_chip_counts(plan.chip_counts),
                tokens_per_s=f"{plan.tokens_per_s:,.0f}",
                price_per_hour=format_estimate(plan.price_per_hour),
                price_per_million_tokens=format_estimate(plan.price_per_million_tokens),
                chosen=policy == spec.policy,
                same_as=seen.get(key, ""),
            )
        )
        seen.setdefault(key, labels.get(policy, policy))
    return rows


def _mix(plan: planner.Plan) -> tuple:
    return tuple(sorted((rank.node_id, rank.mode) for rank in plan.ranks))
