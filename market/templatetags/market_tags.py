"""Template helpers for the job and spot pages: a job's cost so far, its bid. Prices: `{% load money %}`;
durations: `{% load formatting %}`."""

from __future__ import annotations

from django import template
from django.utils.html import format_html, format_html_join

from base.templatetags.money import money_html
from billing.services.statements import job_charged
from fleet.models import ChipType
from market.models import Bid
from market.services.bids import cancelled_chip_types

register = template.Library()


@register.simple_tag
def job_cost(job):
    """What the job has been charged so far (all its allocations, every epoch)."""
    return money_html(job_charged(job))


@register.simple_tag
def bid_in_force(job):
    """The job's bid now: its active bids' prices (a raise or a cut shows at once), else its launch bid;
    then the chip types whose bid was cancelled, which the job no longer rents.

    "¥0.80/chip-h"; one price per chip type when they differ ("¥0.80/chip-h RTX 4090, ¥1.10/chip-h TPU v5e");
    "¥0.80/chip-h on other chip types; none for TPU v5e (cancelled)".
    """
    bids = list(Bid.objects.active().filter(job=job).select_related("chip_type").order_by("chip_type__sort_order"))
    dropped = ChipType.objects.filter(slug__in=cancelled_chip_types(job)).order_by("sort_order")
    if not dropped:
        return _bid_prices(job, bids)
    none = format_html("none for {} (cancelled)", ", ".join(chip.name for chip in dropped))
    if bids:
        return format_html("{}; {}", _bid_prices(job, bids), none)
    if job.allow_other_chips:
        return format_html("{}/chip-h on other chip types; {}", money_html(job.spot_bid_per_hour), none)
    return none


def _bid_prices(job, bids: list[Bid]):
    if not bids:
        return format_html("{}/chip-h", money_html(job.spot_bid_per_hour))
    if len({bid.max_price_per_hour for bid in bids}) == 1:
        return format_html("{}/chip-h", money_html(bids[0].max_price_per_hour))
    return format_html_join(
        ", ", "{}/chip-h {}", ((money_html(bid.max_price_per_hour), bid.chip_type.name) for bid in bids)
    )
