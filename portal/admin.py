"""Admin console: users with their balances and credit adjustments, and API tokens."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import OuterRef, Subquery
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from base.admin import AuditedChangesMixin
from base.audit import already_recorded, record
from base.templatetags.money import money_html
from billing.choices import AccountKind
from billing.forms import CreditAdjustmentForm
from billing.models import Account
from billing.services.credits import adjust_credit
from billing.services.ledger import LedgerError, balance_of
from kernel.money import format_money, format_price, to_micros
from portal.models import ApiToken

User = get_user_model()
admin.site.site_header = gettext_lazy("Starverse operator console")
admin.site.site_title = gettext_lazy("Starverse operator console")
admin.site.unregister(User)


@admin.register(User)
class OperatorUserAdmin(AuditedChangesMixin, UserAdmin):
    list_display = ["username", "email", "balance", "is_staff", "date_joined", "ledger_link", "adjust_link"]
    change_form_template = "admin/portal/user_change_form.html"  # its Ledger and Adjust credit buttons

    def get_queryset(self, request):
        wallets = Account.objects.filter(owner=OuterRef("pk"), kind=AccountKind.WALLET, currency=settings.CURRENCY)
        return super().get_queryset(request).annotate(wallet_balance=Subquery(wallets.values("balance")[:1]))

    @admin.display(description=gettext_lazy("Balance"), ordering="wallet_balance")
    def balance(self, user):
        return money_html(user.wallet_balance or 0)

    @admin.display(description=gettext_lazy("Credit"))
    def adjust_link(self, user) -> str:
        url = reverse("admin:portal_adjust_credit", args=[user.pk])
        return format_html('<a href="{}">{}</a>', url, gettext("Adjust credit"))

    @admin.display(description=gettext_lazy("Ledger"))
    def ledger_link(self, user) -> str:
        return format_html('<a href="{}">{}</a>', ledger_url(user), gettext("Transactions"))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        user = User.objects.filter(pk=object_id).first()
        links = {"ledger_url": ledger_url(user), "balance": money_html(balance_of(user))} if user else {}
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **links})

    def get_urls(self):
        custom = [
            path(
                "<int:user_id>/adjust-credit/",
                self.admin_site.admin_view(self.adjust_credit_view),
                name="portal_adjust_credit",
            )
        ]
        return custom + super().get_urls()

    def adjust_credit_view(self, request, user_id: int):
        """Credit or debit a wallet with a reason; the ledger refuses to make it negative."""
        if not self.has_change_permission(request):
            return redirect("admin:index")
        user = get_object_or_404(User, pk=user_id)
        form = CreditAdjustmentForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            balance_before = balance_of(user)
            try:
                txn = adjust_credit(
                    user,
                    to_micros(form.cleaned_data["amount"]),
                    reason=form.cleaned_data["reason"],
                    actor=request.user,
                    key=form.cleaned_data["idempotency_key"],
                )
            except LedgerError as error:
                form.add_error("amount", str(error))
            else:
                if not already_recorded("credit.adjust", transaction=txn.pk):  # a resubmitted form posts once
                    record(
                        request.user,
                        "credit.adjust",
                        user,
                        transaction=txn.pk,
                        amount=form.cleaned_data["amount"],
                        reason=form.cleaned_data["reason"],
                        before={"balance": format_price(balance_before)},
                        after={"balance": format_price(balance_of(user))},
                    )
                micros = to_micros(form.cleaned_data["amount"])
                done = (
                    gettext(
                        "Credited %(amount)s to %(user)s's wallet; the balance is now %(balance)s "
                        "(transaction #%(transaction)s)."
                    )
                    if micros > 0
                    else gettext(
                        "Debited %(amount)s from %(user)s's wallet; the balance is now %(balance)s "
                        "(transaction #%(transaction)s)."
                    )
                )
                values = {
                    "amount": format_money(abs(micros)),
                    "user": user,
                    "balance": format_price(balance_of(user)),
                    "transaction": txn.pk,
                }
                self.message_user(request, done % values, messages.SUCCESS)
                return redirect("admin:auth_user_changelist")
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Adjust credit: %(user)s") % {"user": user},
            "subject": user,
            "balance": money_html(balance_of(user)),
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/portal/adjust_credit.html", context)


def ledger_url(user) -> str:
    """The user's ledger in the console: the transactions that touch their accounts, with amounts."""
    return f"{reverse('admin:billing_transaction_changelist')}?owner={user.pk}"


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedChangesMixin, admin.ModelAdmin):
    list_display = [
        "name",
        "user",
        "prefix",
        "scope",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = ["scope"]
    search_fields = ["user__username", "prefix", "name"]
    readonly_fields = ["user", "prefix", "token_hash", "created_at", "last_used_at", "revoked_at"]
    fields = ["user", "name", "prefix", "scope", "expires_at", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_selected"]
    audit_name = "api_token"

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description=gettext_lazy("Revoke the selected tokens"))
    def revoke_selected(self, request, queryset) -> None:
        revoked = []
        for token in queryset:
            already = token.revoked_at is not None
            token.revoke()
            if not already:
                record(request.user, "api_token.revoke", token, user=token.user, prefix=token.prefix)
                revoked.append(
                    gettext("“%(name)s” of %(user)s (%(prefix)s…)")
                    % {"name": token.name, "user": token.user, "prefix": token.prefix}
                )
        if not revoked:
            nothing = gettext("Nothing was revoked: the selected tokens were revoked already.")
            self.message_user(request, nothing, messages.INFO)
            return
        self.message_user(
            request,
            gettext("Revoked %(tokens)s: API calls with them are refused from now on.")
            % {"tokens": ", ".join(revoked)},
            messages.SUCCESS,
        )
