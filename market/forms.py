"""Forms of the bids page: place a bid, raise or lower one."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from kernel.money import to_micros
from market.services.bids import BidRefused

# 13 digits: 7 whole (the maximum, 1000000, itself) and 6 decimals (micro-units).
PRICE = {"max_digits": 13, "decimal_places": 6, "min_value": Decimal("0.000001"), "max_value": Decimal("1000000")}
PRICE_WIDGET = forms.NumberInput(attrs={"min": "0", "step": "0.01", "inputmode": "decimal"})
CHIPS = {"min_value": 1, "max_value": 4096}


class JobChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, job: Job) -> str:
        name = f" · {job.name}" if job.name else ""
        return _("Job %(pk)s%(name)s (%(model)s, %(status)s)") % {
            "pk": job.pk,
            "name": name,
            "model": job.model_name,
            "status": job.get_status_display().lower(),
        }


class ChipChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, chip: ChipType) -> str:
        return chip.name


class RefusalMixin:
    """Put a BidRefused on the field it names; what no field shows (the balance) goes above the form."""

    def add_refusal(self, error: BidRefused) -> None:
        self.add_error(error.field if error.field in self.fields else None, str(error))


class BidForm(RefusalMixin, forms.Form):
    """A new bid: which of your live jobs, for which chips, at most how much per chip-hour."""

    job = JobChoiceField(
        queryset=Job.objects.none(),
        label=gettext_lazy("Job"),
        empty_label=gettext_lazy("Choose a job"),
        help_text=gettext_lazy("One of your live spot jobs."),
    )
    chip = ChipChoiceField(
        queryset=ChipType.objects.all(),
        to_field_name="slug",
        label=gettext_lazy("Chip"),
        empty_label=gettext_lazy("Choose…"),
    )
    chips = forms.IntegerField(
        **CHIPS, label=gettext_lazy("Chips"), initial=1, widget=forms.NumberInput(attrs={"min": "1"})
    )
    max_price = forms.DecimalField(
        **PRICE,
        label=gettext_lazy("Max price (¥ per chip-hour)"),
        widget=PRICE_WIDGET,
        help_text=gettext_lazy("You pay the clearing price, never more than this."),
    )

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Only a live spot job's bid is demand (market.services.demand); place_bid refuses the rest too.
        self.fields["job"].queryset = (
            Job.objects.filter(owner=user, spot=True, cancel_requested_at__isnull=True)
            .exclude(status__in=[*JobStatus.finished(), JobStatus.STOPPING])
            .order_by("-created_at", "-id")
        )
        self.fields["job"].error_messages["invalid_choice"] = _("Choose one of your spot jobs that hasn't finished.")
        self.fields["chip"].error_messages["invalid_choice"] = _("Unknown chip type.")

    @property
    def max_price_per_hour(self) -> int:
        return to_micros(self.cleaned_data["max_price"])


class BidChangeForm(RefusalMixin, forms.Form):
    """Raise or lower an active bid: a new price, a new number of chips, or both."""

    chips = forms.IntegerField(
        **CHIPS, required=False, label=gettext_lazy("Chips"), widget=forms.NumberInput(attrs={"min": "1"})
    )
    max_price = forms.DecimalField(
        **PRICE, required=False, label=gettext_lazy("Max price (¥ per chip-hour)"), widget=PRICE_WIDGET
    )

    def clean(self) -> dict:
        data = super().clean()
        if not self.errors and data.get("chips") is None and data.get("max_price") is None:
            raise forms.ValidationError(_("Give a new max price or number of chips."))
        return data

    @property
    def max_price_per_hour(self) -> int | None:
        price = self.cleaned_data.get("max_price")
        return None if price is None else to_micros(price)
