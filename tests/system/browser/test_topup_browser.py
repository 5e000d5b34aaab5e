"""A card top-up in a real browser, against localstripe, a live server and a real worker (docs/RELIABILITY.md #11).

The browser loads localstripe's Stripe.js, localstripe sends its signed webhooks to the live
server, and the Celery worker (on a private queue, against the test database) credits the wallet.
"""

# ruff: noqa: F811

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from billing.choices import TransactionKind
from billing.models import Payment, PaymentStatus, StripeEvent, Transaction
from billing.services.ledger import balance_of
from tests.support.accounts import PASSWORD
from tests.support.localstripe import DECLINING_CARD, GOOD_CARD
from tests.support.stack import platform_stack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(live_server, settings, tmp_path, stripe_on):
    stripe_on.register_webhook(f"{live_server.url}/stripe/webhook/")
    with platform_stack(live_server, settings, tmp_path) as running:
        yield running


def log_in_and_open_billing(page: Page, url: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.locator("main button[type=submit]").click()
    page.goto(f"{url}/billing/")


def pay(page: Page, amount: str, card: str) -> None:
    page.fill("input[name=amount]", amount)
    card_element = page.get_by_test_id("card-element")
    card_element.get_by_placeholder("number").fill(card)
    card_element.get_by_placeholder("exp_month").fill("12")
    card_element.get_by_placeholder("exp_year").fill("34")
    card_element.get_by_placeholder("cvc").fill("123")
    card_element.get_by_placeholder("postal_code").fill("10001")
    page.click("#topup-submit")


def test_a_good_card_tops_up_50_once(live_server, stack, alice, browser_page, screenshots):
    page = browser_page
    before = balance_of(alice)
    log_in_and_open_billing(page, live_server.url)
    page.screenshot(path=str(screenshots / "topup-1-form.png"), full_page=True)

    pay(page, "50.00", GOOD_CARD)

    status = page.get_by_test_id("topup-status")
    expect(status).to_contain_text("Payment received", timeout=15_000)
    expect(status).to_contain_text("¥50.00 added to your balance", timeout=60_000)
    expected = f"¥{(before + 50_000_000) / 1_000_000:.2f}"
    expect(page.get_by_test_id("balance")).to_have_text(expected)
    page.screenshot(path=str(screenshots / "topup-2-credited.png"), full_page=True)

    payment = Payment.objects.get(user=alice)
    assert payment.status == PaymentStatus.SUCCEEDED
    # The webhook was delivered, stored and processed by the worker; nothing credits twice.
    wait_until(lambda: StripeEvent.objects.filter(processed_at__isnull=False).exists(), 10, "processed event", stack)
    assert balance_of(alice) == before + 50_000_000
    assert Transaction.objects.filter(kind=TransactionKind.TOPUP, idempotency_key__startswith="topup:").count() == 1
    page.reload()
    expect(page.get_by_test_id("payments")).to_contain_text("Succeeded")
    page.screenshot(path=str(screenshots / "topup-3-after-reload.png"), full_page=True)


def test_after_a_payment_the_form_is_emptied_and_locked_and_the_history_updates_in_place(
    live_server, stack, alice, browser_page, screenshots
):
    """A second click on Pay with the card still filled in charged it again; the page needed a reload."""
    page = browser_page
    log_in_and_open_billing(page, live_server.url)
    expect(page.get_by_test_id("payments")).to_have_count(0)

    pay(page, "50.00", GOOD_CARD)

    expect(page.get_by_test_id("topup-status")).to_contain_text("¥50.00 added to your balance", timeout=60_000)
    expect(page.locator("input[name=amount]")).to_be_disabled()
    expect(page.locator("input[name=amount]")).to_have_value("")
    expect(page.locator("#topup-submit")).to_be_disabled()
    expect(page.get_by_test_id("card-element").locator("input")).to_have_count(0)
    page.locator("#topup-submit").click(force=True)  # a click on the disabled button charges nothing
    # Without a reload: the payment and its ledger line are listed, and the header shows the new balance.
    expect(page.get_by_test_id("payments")).to_contain_text("Succeeded")
    expect(page.get_by_test_id("ledger")).to_contain_text("+¥50.00")
    expect(page.get_by_test_id("header-balance")).to_contain_text(f"¥{balance_of(alice) / 1_000_000:,.2f}")
    page.screenshot(path=str(screenshots / "topup-6-locked.png"), full_page=True)
    assert Payment.objects.filter(user=alice).count() == 1

    page.get_by_test_id("topup-new").click()

    expect(page.locator("input[name=amount]")).to_be_enabled()
    expect(page.locator("#topup-submit")).to_be_enabled()
    expect(page.get_by_test_id("card-element").get_by_placeholder("number")).to_have_value("")
    expect(page.get_by_test_id("topup-new")).to_be_hidden()
    pay(page, "20.00", GOOD_CARD)
    expect(page.get_by_test_id("topup-status")).to_contain_text("¥20.00 added to your balance", timeout=60_000)
    assert Payment.objects.filter(user=alice, status=PaymentStatus.SUCCEEDED).count() == 2


def test_test_mode_says_so_and_a_top_up_credits_the_balance_on_desktop_and_phone(
    live_server, stack, alice, chromium, screenshots
):
    """Stripe test mode (sk_test_ keys, as `make run` configures with localstripe): the banner names
    the test card, and paying with it credits the balance, at 1366x900 and at a phone's 390x844."""
    before = balance_of(alice)
    for size, amount in (((1366, 900), 50_000_000), ((390, 844), 20_000_000)):
        context = chromium.new_context(viewport={"width": size[0], "height": size[1]})
        page = context.new_page()
        page.set_default_timeout(15_000)
        try:
            log_in_and_open_billing(page, live_server.url)
            banner = page.get_by_test_id("stripe-test-mode")
            expect(banner).to_have_text(
                "Test mode: no real money. Use card 4242 4242 4242 4242, any future date, any CVC."
            )
            expect(banner).to_be_in_viewport()
            wide = page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
            assert not wide, f"the billing page scrolls sideways at {size}"
            page.screenshot(path=str(screenshots / f"topup-test-mode-{size[0]}.png"), full_page=True)

            pay(page, f"{amount // 1_000_000}.00", GOOD_CARD)

            expect(page.get_by_test_id("topup-status")).to_contain_text("added to your balance", timeout=60_000)
            before += amount
            expect(page.get_by_test_id("balance")).to_have_text(f"¥{before / 1_000_000:,.2f}")
            page.screenshot(path=str(screenshots / f"topup-test-mode-{size[0]}-credited.png"), full_page=True)
        finally:
            context.close()
    assert balance_of(alice) == before
    assert Transaction.objects.filter(kind=TransactionKind.TOPUP).count() == 2


def test_a_declining_card_credits_nothing(live_server, stack, alice, browser_page, screenshots):
    page = browser_page
    before = balance_of(alice)
    log_in_and_open_billing(page, live_server.url)

    pay(page, "50.00", DECLINING_CARD)

    expect(page.get_by_test_id("topup-error")).to_contain_text("Your card was declined", timeout=15_000)
    expect(page.get_by_test_id("topup-status")).to_be_hidden()
    page.screenshot(path=str(screenshots / "topup-4-declined.png"), full_page=True)
    # localstripe sends payment_intent.payment_failed; the worker processes it and credits nothing.
    wait_until(
        lambda: StripeEvent.objects.filter(type="payment_intent.payment_failed", processed_at__isnull=False).exists(),
        20,
        "the failure webhook to be processed",
        stack,
    )
    assert Payment.objects.get(user=alice).status == PaymentStatus.FAILED
    assert balance_of(alice) == before
    assert not Transaction.objects.filter(kind=TransactionKind.TOPUP).exists()
    page.reload()
    expect(page.get_by_test_id("balance")).to_have_text(f"¥{before / 1_000_000:.2f}")


def test_a_bad_amount_is_explained_in_the_page(live_server, stripe_on, alice, browser_page, screenshots):
    page = browser_page
    log_in_and_open_billing(page, live_server.url)

    pay(page, "5", GOOD_CARD)

    expect(page.get_by_test_id("amount-error")).to_have_text("The smallest top-up is ¥10.00.")
    page.screenshot(path=str(screenshots / "topup-5-bad-amount.png"), full_page=True)
    assert not Payment.objects.exists()
