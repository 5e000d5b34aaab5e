"""A real browser (Playwright driving Chromium) against pytest-django's live server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

# Playwright's sync API runs an event loop in this thread; Django's ORM calls in the test body
# (fixtures, assertions on the database) would otherwise be refused as "async unsafe".
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

DEBIAN_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def chromium_path() -> str | None:
    """CHROMIUM_PATH, else Debian's Chromium, else Playwright's own download (None)."""
    path = os.environ.get("CHROMIUM_PATH", DEBIAN_CHROMIUM)
    return path if Path(path).exists() else None


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_page(chromium: Browser) -> Iterator[Page]:
    context = chromium.new_context(viewport={"width": 1360, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    folder = Path(os.environ.get("STARVERSE_ARTIFACTS", "artifacts/screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
