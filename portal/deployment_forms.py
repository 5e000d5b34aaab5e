"""The deploy form and the deployment page's replica form (docs/SERVING.md, "Pages").

The forms parse (yuan to micro-units, minutes to seconds); every rule about what may be deployed is
workers.services.deployments', whose `DeploymentRefused` the views put on the field it names.
"""

from __future__ import annotations

import re
from decimal import Decimal

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from billing.services.pricing import current_offers
from fleet.models import Deployment, DeploymentStatus, Job, UploadedModel
from kernel.money import format_amount, format_price, to_micros
from market.services.hints import default_bid

MODEL_REFERENCE = re.compile(r"^(model|job):([0-9]{1,18})$")
MAX_MONEY = Decimal("1000000")
IDLE_UNITS = {"min": 60, "s": 1}
# DeploymentRefused.field -> the form's field (the others are the same name, or none: shown above the form).
REFUSAL_FIELDS = {
    "idle_timeout_s": "idle_timeout",
    "spot_bid_per_hour": "spot_bid",
    "max_budget": "max_budget_per_hour",
}


def money_field(label: str, **kwargs) -> forms.DecimalField:
    """An amount in yuan, as the train form and the API take it: at most six decimals, above zero."""
    return forms.DecimalField(
        label=label,
        max_digits=13,
        decimal_places=6,
        min_value=Decimal("0.000001"),
        max_value=MAX_MONEY,
        widget=forms.NumberInput(attrs={"min": "0", "step": "0.01", "inputmode": "decimal"}),
        **kwargs,
    )


def count_field(label: str, initial: int, minimum: int, **kwargs) -> forms.IntegerField:
    # No upper bound here: the service says what the maximum is, on the field.
    return forms.IntegerField(
        label=label, initial=initial, widget=forms.NumberInput(attrs={"min": str(minimum)}), **kwargs
    )


class DeployForm(forms.Form):
    """A new deployment: what to serve, on which chips, for how much, and how it scales."""

    model = forms.CharField(
        label=_("Model"),
        max_length=200,
        help_text=_("model:<id> (an upload), job:<id> (a finished job's trained model) or a cached Hugging Face id."),
    )
    name = forms.CharField(
        label=_("Name"),
        max_length=64,
        help_text=_("Requests name it as their model: letters, digits, '.', '_' and '-'."),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    chip = forms.ChoiceField(label=_("Chip type"), required=False)
    chips_per_replica = count_field(
        _("Chips per replica"), 1, 1, help_text=_("With a chip type chosen; the planner sizes its own pick.")
    )
    max_budget_per_hour = money_field(
        _("Hourly budget per replica (¥)"), initial="10", help_text=_("The most one replica's chips may cost an hour.")
    )
    total_budget = money_field(
        _("Total budget (¥, optional)"),
        required=False,
        help_text=_("Every replica together; the deployment stops once it is spent."),
    )
    spot = forms.BooleanField(
        label="Spot",
        required=False,
        help_text=_("Spare chips at the auction's price: cheaper, but a replica can be reclaimed and replaced."),
    )
    spot_bid = money_field(_("Spot bid (¥ per chip-hour)"), required=False)
    min_replicas = count_field(
        _("Min replicas"), 1, 0, help_text=_("0: scale to zero when idle (the next request waits).")
    )
    max_replicas = count_field(_("Max replicas"), 1, 1, help_text=_("More start while requests queue."))
    idle_timeout = count_field(
        _("Idle timeout"), 5, 1, help_text=_("Replicas above the minimum stop after this long idle.")
    )
    idle_unit = forms.ChoiceField(label=_("Unit"), choices=[("min", _("minutes")), ("s", _("seconds"))], initial="min")
    max_model_len = forms.IntegerField(
        label=_("Max model length (tokens, optional)"),
        required=False,
        min_value=1,
        max_value=1_048_576,
        widget=forms.NumberInput(attrs={"min": "1", "placeholder": _("the model's")}),
        help_text=_("Prompt and answer together; longer requests are refused."),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["chip"].choices = [("", _("Let the planner choose")), *chip_choices()]
        bid = default_bid()
        if bid is not None:  # ticking Spot finds a bid in place, as on the train form
            self.fields["spot_bid"].initial = format_amount(bid)
            self.fields["spot_bid"].help_text = _("Preset to %(bid)s; you pay the clearing price, never more.") % {
                "bid": format_price(bid)
            }

    def deployment_kwargs(self) -> dict:
        """create_deployment's keyword arguments; call after is_valid()."""
        data = self.cleaned_data
        spot = bool(data["spot"])
        bid = data.get("spot_bid") or self.fields["spot_bid"].initial
        return {
            "name": data["name"].strip(),
            "model_name": data["model"].strip(),
            "chip": data["chip"] or "",
            "chips_per_replica": data["chips_per_replica"],
            "max_budget_per_hour": to_micros(data["max_budget_per_hour"]),
            "total_budget": to_micros(data["total_budget"]) if data.get("total_budget") else None,
            "spot": spot,
            "spot_bid_per_hour": to_micros(bid) if spot and bid else None,
            "min_replicas": data["min_replicas"],
            "max_replicas": data["max_replicas"],
            "idle_timeout_s": data["idle_timeout"] * IDLE_UNITS[data["idle_unit"]],
            "max_model_len": data.get("max_model_len"),
        }

    def add_refusal(self, field: str, message: str) -> None:
        field = REFUSAL_FIELDS.get(field, field)
        self.add_error(field if field in self.fields else None, message)


class ReplicasForm(forms.Form):
    """The deployment page's scaling form: new replica bounds and idle timeout (in seconds)."""

    min_replicas = count_field(_("Min replicas"), 1, 0)
    max_replicas = count_field(_("Max replicas"), 1, 1)
    idle_timeout_s = count_field(_("Idle timeout (s)"), 300, 1)

    def add_refusal(self, field: str, message: str) -> None:
        self.add_error(field if field in self.fields else None, message)


def chip_choices() -> list[tuple[str, str]]:
    """The chip types the fleet has pools of, with their on-demand price and free chips now."""
    choices = []
    for offer in current_offers():
        if not offer.capacity and not offer.offline:
            continue
        price = f" · {format_price(offer.on_demand_per_hour)}/h" if offer.on_demand_per_hour else ""
        free = gettext("%(count)s free") % {"count": offer.free}
        choices.append((offer.chip.slug, f"{offer.chip.name}{price} · {free}"))
    return choices


def suggested_name(owner, model_name: str) -> str:
    """A deployment name from the model's (its upload's or job's name), free among the owner's live ones."""
    base = model_label(owner, model_name)
    slug = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._")[:56] or "model"
    taken = set(
        Deployment.objects.filter(owner=owner).exclude(status=DeploymentStatus.STOPPED).values_list("name", flat=True)
    )
    name, number = slug, 2
    while name in taken:
        name, number = f"{slug}-{number}", number + 1
    return name


def model_label(owner, model_name: str) -> str:
    reference = MODEL_REFERENCE.match(model_name.strip())
    if reference is None:
        return model_name.strip().rsplit("/", 1)[-1]
    kind, pk = reference[1], int(reference[2])
    if kind == "model":
        upload = UploadedModel.objects.filter(owner=owner, pk=pk).first()
        return upload.name if upload else f"model-{pk}"
    job = Job.objects.filter(owner=owner, pk=pk).first()
    return job.name if job and job.name else f"job-{pk}"
