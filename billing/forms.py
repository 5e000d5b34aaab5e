"""Admin forms that take money in currency units and store micro-units."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django import forms
from django.conf import settings
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing.models import OperatorSettings, Price
from kernel.money import to_decimal, to_micros

MAX_PRICE = Decimal("100000")
MAX_ADJUSTMENT = Decimal("1000000")


def money_field(label, **kwargs) -> forms.DecimalField:
    """An amount typed in currency units (yuan, "1.35"), up to six decimals; `to_micros` stores it exactly."""
    symbol = settings.CURRENCY_SYMBOL
    kwargs.setdefault(
        "help_text", format_lazy(gettext_lazy("In {symbol} (yuan), e.g. 1.35; up to six decimals."), symbol=symbol)
    )
    label = format_lazy("{label} ({symbol})", label=label, symbol=symbol)
    return forms.DecimalField(label=label, max_digits=14, decimal_places=6, **kwargs)


class PriceForm(forms.ModelForm):
    on_demand = money_field(gettext_lazy("On-demand per chip-hour"), min_value=Decimal("0.000001"), max_value=MAX_PRICE)
    spot_floor = money_field(
        gettext_lazy("Spot floor per chip-hour"), min_value=Decimal("0.000001"), max_value=MAX_PRICE
    )

    class Meta:
        model = Price
        fields = ["chip_type", "on_demand", "spot_floor", "effective_at", "note"]

    def clean(self):
        cleaned = super().clean()
        on_demand, spot_floor = cleaned.get("on_demand"), cleaned.get("spot_floor")
        if on_demand is not None and spot_floor is not None and spot_floor > on_demand:
            self.add_error("spot_floor", _("The spot floor cannot be above the on-demand price."))
        return cleaned

    def save(self, commit: bool = True) -> Price:
        self.instance.on_demand_per_hour = to_micros(self.cleaned_data["on_demand"])
        self.instance.spot_floor_per_hour = to_micros(self.cleaned_data["spot_floor"])
        return super().save(commit=commit)


class CreditAdjustmentForm(forms.Form):
    amount = money_field(
        gettext_lazy("Amount"),
        min_value=-MAX_ADJUSTMENT,
        max_value=MAX_ADJUSTMENT,
        help_text=format_lazy(
            gettext_lazy("In {symbol} (yuan), e.g. 5.50: positive credits the wallet, negative (-5.50) debits it."),
            symbol=settings.CURRENCY_SYMBOL,
        ),
    )
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=400, widget=forms.Textarea(attrs={"rows": 3}))
    # A key per rendered form: submitting the same form twice posts one transaction.
    idempotency_key = forms.CharField(widget=forms.HiddenInput, initial=lambda: f"adjust:{uuid.uuid4()}")

    def clean_amount(self) -> Decimal:
        amount = self.cleaned_data["amount"]
        if amount == 0:
            raise forms.ValidationError(_("The amount cannot be zero."))
        return amount

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError(_("Say why you adjust this user's credit."))
        return reason


class OperatorSettingsForm(forms.ModelForm):
    trial_credit_amount = money_field(
        gettext_lazy("Trial credit at sign-up"), min_value=Decimal("0"), max_value=Decimal("10000")
    )

    class Meta:
        model = OperatorSettings
        fields = ["staff_two_factor_required", "telemetry_retention_days"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["trial_credit_amount"].initial = to_decimal(self.instance.trial_credit)

    def save(self, commit: bool = True):
        self.instance.trial_credit = to_micros(self.cleaned_data["trial_credit_amount"])
        return super().save(commit=commit)
