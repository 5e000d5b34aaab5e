"""Every badge the pages show is readable: WCAG AA contrast (4.5:1) between its text and its background,
computed from the colours in static/css/starverse.css (variables resolved, later rules winning)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.choices import JobStatus, MigrationStatus
from fleet.models import DeploymentStatus
from market.models import BidStatus

STYLESHEET = Path(__file__).resolve().parents[2] / "static" / "css" / "starverse.css"
AA = 4.5
SURFACE = "#ffffff"  # a badge without a background of its own sits on a card


def top_level_rules(css: str) -> list[tuple[list[str], dict[str, str]]]:
    """(selectors, declarations) of each rule outside @media and other blocks, in order."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules, depth, start = [], 0, 0
    for index, char in enumerate(css):
        if char == "{":
            if depth == 0:
                head, body_start = css[start:index].strip(), index + 1
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if not head.startswith("@"):
                    rules.append(([s.strip() for s in head.split(",")], declarations(css[body_start:index])))
                start = index + 1
    return rules


def declarations(body: str) -> dict[str, str]:
    pairs = (part.split(":", 1) for part in body.split(";") if ":" in part)
    return {name.strip(): value.strip() for name, value in pairs}


def styles() -> dict[str, dict[str, str]]:
    """Each selector's declarations, later rules overriding earlier ones, with var(--x) resolved."""
    merged: dict[str, dict[str, str]] = {}
    for selectors, decls in top_level_rules(STYLESHEET.read_text()):
        for selector in selectors:
            merged.setdefault(selector, {}).update(decls)
    variables = merged[":root"]
    resolve = lambda value: re.sub(r"var\((--[\w-]+)\)", lambda m: variables[m.group(1)], value)  # noqa: E731
    return {selector: {k: resolve(v) for k, v in decls.items()} for selector, decls in merged.items()}


def colours(classes: list[str]) -> tuple[str, str]:
    """(text, background) of an element with these classes: the last class that sets each wins."""
    rules = styles()
    text, background = "#161a2b", SURFACE
    for name in classes:
        decls = rules.get("." + name, {})
        text = decls.get("color", text)
        background = decls.get("background", background)
    return text, background


def luminance(hex_colour: str) -> float:
    hex_colour = hex_colour.lstrip("#")
    if len(hex_colour) == 3:
        hex_colour = "".join(c * 2 for c in hex_colour)
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(text: str, background: str) -> float:
    light, dark = sorted((luminance(text), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


# Every badge the templates draw, by its classes (templates/partials/training/status_badge.html,
# partials/deployments/status_badge.html, market/bids.html, job_migrations.html, the pricing and quote tags).
BADGES = {
    **{f"job {status}": ["badge", "status", f"status-{status}"] for status in JobStatus.values},
    **{f"deployment {status}": ["badge", "status", f"status-{status}"] for status in DeploymentStatus.values},
    **{f"bid {status}": ["badge", "bid-status", f"bid-status-{status}"] for status in BidStatus.values},
    **{f"move {s}": ["badge", "migration-status", f"migration-status-{s}"] for s in MigrationStatus.values},
    "online": ["badge", "badge-on"],
    "offline": ["badge", "badge-off"],
    "simulated": ["badge", "badge-sim"],
    "tag": ["tag"],
    "spot tag": ["tag", "tag-spot"],
}


def test_the_contrast_of_a_known_pair_is_computed_as_wcag_defines_it():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#15803d", "#e7f6ec") == pytest.approx(4.49, abs=0.005)  # the old "Succeeded" badge


@pytest.mark.parametrize("badge", BADGES)
def test_every_badge_has_at_least_aa_contrast(badge):
    text, background = colours(BADGES[badge])
    assert contrast(text, background) >= AA, f"{badge}: {text} on {background} is {contrast(text, background):.2f}:1"
