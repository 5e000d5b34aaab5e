"""Invoice (fapiao) requests: one per customer and closed month, for what they paid in it (docs/INVOICES.md).

The amount is the month's top-ups less the month's refunds, as the statement lists them under Payments
and Refunds: an invoice is for money received, not for usage (usage is paid from credit already invoiced).
The customer's invoice details are copied into the request, so later edits do not change a request made.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from base.audit import record
from billing.choices import TransactionKind
from billing.models import InvoiceDetails, InvoiceRequest, InvoiceStatus
from billing.services.statements import StatementError, entries_in, parse_month
from kernel.money import format_price


class InvoiceError(Exception):
    """A request or an issue that cannot go ahead; the message is safe to show (already translated)."""


def details_of(user) -> InvoiceDetails | None:
    return InvoiceDetails.objects.filter(user=user).first()


def invoice_amount(user, month: str) -> int:
    """What the customer paid in the month: its top-ups less its refunds (micro-units)."""
    period = parse_month(month)
    kinds = (TransactionKind.TOPUP, TransactionKind.REFUND)
    return (
        entries_in(user, period)
        .filter(transaction__kind__in=kinds)
        .order_by()
        .aggregate(total=Sum("amount", default=0))["total"]
    )


def month_closed(month: str, now=None) -> bool:
    """The month is over in the active time zone (the person's own)."""
    return parse_month(month).end <= (now or timezone.now())


def request_for(user, month: str) -> InvoiceRequest | None:
    return InvoiceRequest.objects.filter(user=user, month=month).first()


def request_invoice(user, month: str, now=None) -> InvoiceRequest:
    """Ask for the invoice of a closed month; refused without invoice details, for nothing paid, or twice."""
    try:
        parse_month(month)
    except StatementError as error:
        raise InvoiceError(str(error)) from None
    details = details_of(user)
    if details is None:
        raise InvoiceError(_("Add your invoice details (company name, taxpayer id, address) first."))
    if not month_closed(month, now):
        raise InvoiceError(_("An invoice can be requested once the month %(month)s is over.") % {"month": month})
    if request_for(user, month) is not None:
        raise InvoiceError(_("An invoice for %(month)s has already been requested.") % {"month": month})
    amount = invoice_amount(user, month)
    if amount <= 0:
        raise InvoiceError(_("Nothing was paid in %(month)s, so there is nothing to invoice.") % {"month": month})
    try:
        with transaction.atomic():
            return InvoiceRequest.objects.create(
                user=user,
                month=month,
                amount=amount,
                company_name=details.company_name,
                taxpayer_id=details.taxpayer_id,
                address=details.address,
                bank=details.bank,
                phone=details.phone,
            )
    except IntegrityError:  # the same request, sent twice at once
        raise InvoiceError(_("An invoice for %(month)s has already been requested.") % {"month": month}) from None


def mark_issued(invoice: InvoiceRequest, number: str, *, actor, now=None) -> InvoiceRequest:
    """The operator issued the invoice: its number, when and who; audited with the change."""
    number = (number or "").strip()
    if not number:
        raise InvoiceError(_("Enter the invoice number to mark the request issued."))
    with transaction.atomic():
        locked = InvoiceRequest.objects.select_for_update().get(pk=invoice.pk)
        if locked.status == InvoiceStatus.ISSUED:
            if locked.invoice_number == number:
                return locked  # a resubmitted form
            raise InvoiceError(
                _("This request was already issued as invoice %(number)s.") % {"number": locked.invoice_number}
            )
        locked.status = InvoiceStatus.ISSUED
        locked.invoice_number = number[:64]
        locked.issued_at = now or timezone.now()
        locked.issued_by = actor
        locked.save(update_fields=["status", "invoice_number", "issued_at", "issued_by"])
        record(
            actor,
            "invoice.issue",
            locked,
            user=locked.user.get_username(),
            month=locked.month,
            amount=format_price(locked.amount),
            invoice_number=locked.invoice_number,
        )
    return locked
