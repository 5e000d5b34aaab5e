"""Which language a page speaks: the account's choice, then the header's switch, then Accept-Language."""

from __future__ import annotations

import pytest
from django.urls import reverse

from base.models import Preferences

pytestmark = pytest.mark.django_db


def test_a_browser_asking_for_chinese_gets_chinese(client):
    page = client.get(reverse("pricing"), HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")
    body = page.content.decode()
    assert '<html lang="zh-hans">' in body
    assert "退出登录" not in body and "登录" in body


def test_without_a_preference_the_page_is_english(client):
    body = client.get(reverse("pricing")).content.decode()
    assert '<html lang="en">' in body
    assert ">Log in<" in body


def test_the_header_switch_sets_the_language_for_the_next_pages(client):
    answer = client.post(reverse("set_language"), {"language": "zh-hans", "next": "/pricing/"})
    assert answer.status_code == 302 and answer["Location"] == "/pricing/"
    body = client.get(reverse("pricing"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="zh-hans">' in body


def test_a_signed_in_person_keeps_the_language_they_switched_to(client, django_user_model):
    user = django_user_model.objects.create_user("lin", "lin@example.com", "pw-pw-pw-1")
    client.force_login(user)
    client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    assert Preferences.objects.get(user=user).language == "zh-hans"
    other_browser = type(client)()
    other_browser.force_login(user)
    body = other_browser.get(reverse("pricing"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="zh-hans">' in body


def test_the_saved_language_comes_before_the_browsers(client, django_user_model):
    user = django_user_model.objects.create_user("ana", "ana@example.com", "pw-pw-pw-1")
    Preferences.objects.create(user=user, language="en")
    client.force_login(user)
    body = client.get(reverse("pricing"), HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert '<html lang="en">' in body


def test_an_unknown_language_changes_nothing(client, django_user_model):
    user = django_user_model.objects.create_user("kim", "kim@example.com", "pw-pw-pw-1")
    client.force_login(user)
    client.post(reverse("set_language"), {"language": "xx", "next": "/"})
    assert not Preferences.objects.filter(user=user).exists()


def test_the_page_scripts_get_their_strings_in_the_active_language(client):
    answer = client.get(reverse("javascript-catalog"), HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert answer.status_code == 200 and b"gettext" in answer.content
