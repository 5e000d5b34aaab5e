"""What the billing page and a month's statement show of receipts and invoices: `{% load invoices %}`, then

- `{% receipts_of user as receipts %}`: the user's newest receipts (one per credited top-up);
- `{% invoice_state user month as invoice %}`: the month's invoice request (if any), whether the user has
  invoice details, whether the month is over, and what an invoice for it would be for.
"""

from __future__ import annotations

from django import template

from billing.models import InvoiceDetails, Receipt
from billing.services.invoices import invoice_amount, month_closed, request_for
from billing.services.statements import StatementError

register = template.Library()
RECEIPTS_SHOWN = 20


@register.simple_tag
def receipts_of(user) -> list[Receipt]:
    if not getattr(user, "is_authenticated", False):
        return []
    return list(Receipt.objects.filter(user=user)[:RECEIPTS_SHOWN])


@register.simple_tag
def invoice_state(user, month: str) -> dict:
    try:
        closed = month_closed(month)
        amount = invoice_amount(user, month)
    except StatementError:
        return {}
    return {
        "request": request_for(user, month),
        "has_details": InvoiceDetails.objects.filter(user=user).exists(),
        "closed": closed,
        "amount": amount,
    }
