"""simulate_market: a seeded day of spot demand replayed against the real auction, and the command that prints it."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from market.auction import Bid
from market.simulation import ChipMarket, SpotJob, Step, generate_steps, replay, simulate

YEN = 1_000_000
RTX = ChipMarket("rtx-4090", capacity=8, floor=YEN // 2, on_demand=1_200_000)
BIG = ChipMarket("big", capacity=200, floor=YEN // 2, on_demand=1_200_000)


# The simulation on hand-made days


def test_reclaims_count_bids_that_lose_chips_to_a_later_clearing():
    market = ChipMarket("tiny", capacity=4, floor=YEN // 2, on_demand=1_200_000)
    a, b, c = Bid(1, YEN, 2, 1.0), Bid(2, 800_000, 2, 2.0), Bid(3, 900_000, 2, 3.0)
    steps = [
        Step(arrivals=(a, b)),  # both fit: price at the floor
        Step(arrivals=(c,)),  # c outbids b, which loses its 2 chips
        Step(on_demand=1),  # on-demand takes a chip: c, the lowest winner, gives one back
        Step(departures=(1,), on_demand=1),  # a leaves by itself: not a reclaim; c and b grow
        Step(departures=(3,)),  # c leaves too: b alone, back at the floor
    ]
    run = replay(market, steps, step_seconds=60)
    assert [r.reclaims for r in run.rounds] == [0, 1, 1, 0, 0]
    assert [r.reclaimed_chips for r in run.rounds] == [0, 2, 1, 0, 0]
    assert [r.price for r in run.rounds] == [YEN // 2, 800_000, 900_000, 800_000, YEN // 2]
    assert [r.capacity for r in run.rounds] == [4, 4, 3, 3, 4]
    assert [r.allocated for r in run.rounds] == [4, 4, 3, 3, 2]
    assert (run.reclaims, run.reclaimed_chips) == (2, 3)


def test_the_job_pays_the_clearing_price_for_the_chips_it_wins_and_counts_its_interruptions():
    market = ChipMarket("tiny", capacity=2, floor=YEN // 2, on_demand=1_200_000)
    job = SpotJob(chips=2, hours=1, bid=YEN)
    rival, small = Bid(1, 2 * YEN, 2, 10.0), Bid(2, 700_000, 1, 20.0)
    steps = [
        Step(),  # the job alone: 2 chips at the floor (0.5) for 900 s
        Step(arrivals=(rival,)),  # outbid: loses both chips, the price is its own bid
        Step(departures=(1,)),  # back on 2 chips at the floor
        Step(arrivals=(small,)),  # small bid below the job's: the job pays 0.7
        Step(on_demand=1),  # one chip left: the job keeps 1, is the marginal bid, pays its bid
        Step(),  # 2 chips at 0.7; needs only 900 chip-seconds more: done 450 s into the step
        Step(),  # the job has left; the small bid wins at the floor
    ]
    run = replay(market, steps, step_seconds=900, job=job)
    outcome = run.job
    assert outcome.finished_at == 5 * 900 + 450
    assert outcome.chip_seconds == 7200
    # 0.5*1800 + 0.5*1800 + 0.7*1800 + 1.0*900 + 0.7*900 = 4590 ¥-chip-seconds = ¥1.275
    assert outcome.spot_cost == 1_275_000
    assert outcome.on_demand_cost(market.on_demand) == 2_400_000
    assert outcome.interruptions == 2
    assert outcome.waiting_seconds == 900
    assert [r.reclaimed_chips for r in run.rounds] == [0, 2, 0, 0, 1, 0, 0]
    assert run.rounds[-1].allocated == 1 and run.rounds[-1].price == YEN // 2


def test_a_job_bidding_below_the_floor_never_runs():
    steps = [Step()] * 4
    run = replay(RTX, steps, step_seconds=60, job=SpotJob(chips=1, hours=1, bid=RTX.floor - 1))
    assert run.job.chip_seconds == 0 and run.job.spot_cost == 0
    assert not run.job.finished
    assert run.job.waiting_seconds == 240


# Generated days


def test_the_same_seed_gives_the_same_day():
    job = SpotJob(chips=4, hours=2, bid=850_000)
    first = simulate([RTX, BIG], seed=7, hours=3, job=job)
    assert first == simulate([RTX, BIG], seed=7, hours=3, job=job)
    assert [r.demand for r in first[1].rounds] != [r.demand for r in simulate([BIG], seed=8, hours=3)[0].rounds]


def test_a_chip_types_day_does_not_depend_on_the_others_simulated_with_it():
    (alone,) = simulate([BIG], seed=4, hours=2)
    assert simulate([RTX, BIG], seed=4, hours=2)[1] == alone


def test_every_generated_round_respects_the_auction_rules():
    (run,) = simulate([BIG], seed=2, hours=24, step_seconds=300)
    assert len(run.rounds) == 24 * 12
    for one in run.rounds:
        assert one.price >= BIG.floor
        assert 0 <= one.capacity <= BIG.capacity
        assert one.allocated == min(one.capacity, one.demand)
    assert sum(row.reclaims for row in run.hourly()) == run.reclaims > 0


def test_the_afternoon_peak_costs_more_than_the_night():
    (run,) = simulate([BIG], seed=1, hours=24, step_seconds=300)
    hourly = {row.hour: row for row in run.hourly()}
    night = sum(hourly[h].price for h in range(2, 7)) / 5
    afternoon = sum(hourly[h].price for h in range(14, 19)) / 5
    assert night < afternoon
    assert sum(hourly[h].demand for h in range(14, 19)) > sum(hourly[h].demand for h in range(2, 7))


def test_on_demand_never_takes_more_than_the_spot_eligible_chips():
    steps = generate_steps(RTX, seed=5, hours=24, step_seconds=60)
    assert max(step.on_demand for step in steps) <= RTX.capacity
    assert any(step.on_demand for step in steps)


# The command against the seeded catalog


def run_command(*args: str) -> str:
    out = io.StringIO()
    call_command("simulate_market", *args, stdout=out)
    return out.getvalue()


def hour_rows(text: str, slug: str) -> list[list[str]]:
    section = text.split(f"\n{slug}: ")[1].split("\n\n")[0]
    return [line.split() for line in section.splitlines() if re.match(r"^\s+\d+\s", line)]


def test_command_prints_the_price_path_reclaims_and_job_cost_from_the_catalog(catalog):
    text = run_command("--seed", "3", "--hours", "4", "--chip", "rtx-4090")
    assert text.startswith("SIMULATION of the spot market, not real data")
    assert "rtx-4090: 8 chips (spot-eligible in the catalog); floor ¥0.50, on-demand ¥1.20 per chip-hour" in text
    rows = hour_rows(text, "rtx-4090")
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert all(float(row[4]) <= 8 for row in rows)  # capacity column
    assert re.search(r"reclaims: \d+ bid\(s\) lost chips to a later clearing, \d+ chip\(s\) in all", text)
    assert "job: 4 chip(s) for 6 h, bidding ¥0.85 per chip-hour (halfway between floor and on-demand)" in text
    assert "on-demand: ¥" in text and "(the whole job: ¥28.80 in 6 h)" in text
    assert "a100-80g" not in text


def test_command_output_is_the_same_for_the_same_seed(catalog):
    args = ("--seed", "11", "--hours", "3", "--chip", "tpu-v5e", "mlu370")
    assert run_command(*args) == run_command(*args)


def test_command_assumes_a_stated_capacity_for_a_chip_type_with_no_spot_eligible_node(catalog):
    text = run_command("--hours", "1", "--chip", "h100-80g")
    assert "h100-80g: 64 chips (assumed: no spot-eligible node in the catalog, so 64)" in text


def test_command_capacity_override(catalog):
    text = run_command("--hours", "1", "--chip", "rtx-4090", "--capacity", "500", "--job-bid", "2.5")
    assert "rtx-4090: 500 chips (set by --capacity)" in text
    assert "bidding ¥2.50 per chip-hour\n" in text


def test_command_says_when_the_job_bid_is_below_the_floor(catalog):
    text = run_command("--hours", "1", "--chip", "rtx-4090", "--job-bid", "0.40", "--job-hours", "0.5")
    assert "its bid is below the floor: it never wins spot chips." in text
    assert "spot: ¥0.00 for 0.0 chip-hours, not finished in 1 h" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--chip", "rtx-9999"), "Unknown chip type(s): rtx-9999"),
        (("--job-bid", "abc"), "--job-bid: 'abc' is not a number"),
        (("--job-hours", "0"), "--job-hours must be a positive number"),
        (("--step-seconds", "0"), "--step-seconds must be between 1 and 3600"),
        (("--capacity", "-1"), "--capacity cannot be negative"),
    ],
)
def test_command_refuses_bad_options_with_a_clear_message(catalog, args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        run_command("--hours", "1", *args)


@pytest.mark.django_db
def test_command_on_an_empty_catalog_says_to_seed_it():
    with pytest.raises(CommandError, match="run `manage.py seed_catalog` first"):
        run_command("--hours", "1")
