from io import StringIO
import pytest
from django.core.management import call_command
from portal.models.tokens import ApiToken

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_shots(live_server, browser_page, screenshots, django_user_model):
    call_command("seed_catalog", stdout=StringIO())
    page, url = browser_page, live_server.url
    for name, path in [("home", "/"), ("login", "/accounts/login/"), ("signup", "/accounts/signup/"), ("pricing-anon", "/pricing/")]:
        page.goto(url + path)
        page.screenshot(path=screenshots / f"tmp-{name}.png", full_page=True)
    page.goto(url + "/accounts/signup/")
    page.fill("#id_username", "x")
    page.fill("#id_email", "bad")
    page.locator("main form button[type=submit]").click()
    page.screenshot(path=screenshots / "tmp-signup-errors.png", full_page=True)
    user = django_user_model.objects.create_user("bo", "bo@example.com", "Pw-123456789x", is_staff=True)
    ApiToken.issue(user, name="old one")
    page.goto(url + "/accounts/login/")
    page.fill("#id_login", "bo")
    page.fill("#id_password", "Pw-123456789x")
    page.locator("main form button[type=submit]").click()
    page.goto(url + "/dashboard/tokens/")
    page.fill("#id_expires_in_days", "400")
    page.fill("#id_name", "")
    page.get_by_role("button", name="Create token").click()
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Revoke").click()
    page.wait_for_selector("text=revoked")
    page.screenshot(path=screenshots / "tmp-tokens-errors.png", full_page=True)
    page.goto(url + "/accounts/logout/")
    page.screenshot(path=screenshots / "tmp-logout.png", full_page=True)
    page.goto(url + "/accounts/password/reset/")
    page.screenshot(path=screenshots / "tmp-reset.png", full_page=True)
