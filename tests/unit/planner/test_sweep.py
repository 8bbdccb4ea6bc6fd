"""The sweep's pure parts: machines and prices read from the flags, each point's share of a bound,
throughput and time to train, the fastest and cheapest marked, speedups per machine."""

import math

import pytest

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from networks.errors import DnnplanError
from networks.loader import load_network
from planner.problem.solve import Settings
from planner.solvers import Budget
from planner.sweep import (MIN_POINT_S, mark_best, parse_counts, parse_machines, parse_prices, point, point_seconds, priced,
                           with_speedups)

MACHINES = ["dgx-a100", "dgx-h100"]


def test_machines_in_the_order_named_each_once():
    assert parse_machines(" dgx-h100, dgx-a100,dgx-h100 ,") == ["dgx-h100", "dgx-a100"]
    with pytest.raises(DnnplanError, match="names no machine"):
        parse_machines(" , ")


def test_one_price_is_every_machine_s_and_named_prices_each_their_own():
    assert parse_prices(None, MACHINES) is None
    assert parse_prices("2.5", MACHINES) == {"dgx-a100": 2.5, "dgx-h100": 2.5}
    assert parse_prices("dgx-h100=2.5, dgx-a100 = 1.6", MACHINES) == {"dgx-h100": 2.5, "dgx-a100": 1.6}


@pytest.mark.parametrize("text, words", [
    ("dgx-h200=3,dgx-a100=1,dgx-h100=2", "names 'dgx-h200', which --machine does not plan for"),
    ("dgx-a100=1.6", "no price for dgx-h100"),
    ("dgx-a100=1.6,2.5", "names no machine"),
    ("dgx-a100=cheap,dgx-h100=2", "'cheap' for 'dgx-a100' is not a price"),
    ("-1", "is not a price"),
    ("nan", "is not a price"),
    ("dgx-a100=1,dgx-a100=2,dgx-h100=2", "prices 'dgx-a100' twice"),
])
def test_bad_prices_are_refused_naming_the_part(text, words):
    with pytest.raises(DnnplanError, match=words):
        parse_prices(text, MACHINES)


def test_a_point_shares_what_is_left_among_the_points_left_within_its_bounds():
    assert point_seconds(40.0, 8) == 5.0
    assert point_seconds(40.0, 8, jobs=2) == 10.0
    assert point_seconds(0.0, 8) == MIN_POINT_S  # overrun: the least a point searches
    assert point_seconds(400.0, 2, most_s=17.0) == 17.0


def _row(machine, devices, step):
    return {"machine": machine, "devices": devices, "step_s": step}


def test_priced_rows_carry_throughput_and_the_time_and_cost_to_train():
    row = priced(_row("dgx-a100", 4, 2.0), batch=8, tokens_per_step=8 * 1000, tokens=1e6, price=3.0)
    assert row["samples_per_s"] == 4.0 and row["tokens_per_s"] == 4000.0 and row["device_s_per_step"] == 8.0
    train = row["train"]
    assert train["steps"] == 125 and train["seconds"] == 250.0
    assert math.isclose(train["device_hours"], 250.0 * 4 / 3600) and math.isclose(train["cost"],
                                                                                   3.0 * train["device_hours"])
    failed = {"machine": "dgx-a100", "devices": 2, "error": "no plan"}
    assert priced(dict(failed), 8, 8000, 1e6, 3.0) == failed


def test_fastest_is_the_shortest_step_and_cheapest_the_least_cost_or_device_time():
    rows = [_row("a", 8, 4.0), _row("a", 16, 2.5), _row("b", 8, 3.0), {"machine": "b", "devices": 16, "error": "x"}]
    mark_best(rows)  # unpriced: the fewest device-seconds a step (a,8: 32; a,16: 40; b,8: 24)
    assert [(r.get("fastest"), r.get("cheapest")) for r in rows] == [(False, False), (True, False), (False, True),
                                                                     (None, None)]
    for r, cost in zip(rows, (10.0, 30.0, 40.0)):
        r["train"] = {"cost": cost}
    mark_best(rows)  # priced: the least cost, whatever the device time
    assert [r["cheapest"] for r in rows[:3]] == [True, False, False] and rows[1]["fastest"]


def test_ties_go_to_the_fewer_devices():
    rows = mark_best([_row("a", 16, 1.0), _row("b", 8, 1.0), _row("c", 4, 2.0)])
    # b,8 is as fast as a,16 and c,4 as cheap as b,8 (8 device-s each): the fewer devices win each tie, alone
    assert [(r["fastest"], r["cheapest"]) for r in rows] == [(False, False), (True, False), (False, True)]


def test_speedups_are_over_each_machine_s_first_count_with_a_plan():
    rows = with_speedups([_row("a", 2, 4.0), _row("a", 4, 2.5), {"machine": "b", "devices": 2, "error": "x"},
                          _row("b", 4, 1.0), _row("b", 8, 0.8)])
    assert [r.get("speedup") for r in rows] == [1.0, 1.6, None, 1.0, 1.25]
    assert rows[4]["efficiency"] == 0.625


def test_a_point_is_never_slower_than_the_data_parallel_step_beside_it():
    # 7 devices do not divide a batch of 32: data parallelism over them (an uneven split, priced as a
    # baseline) is no candidate of the per-layer search, whose optimum took 7.7 ms against its 4.3 ms
    net, machine = load_network("resnet18"), load_machine("dgx-a100")
    row = point(net, "resnet18", 32, 7, machine, Roofline(machine), None, Settings())
    assert row["data_fits"] and row["step_s"] <= row["data_step_s"] * (1 + 1e-9)


def test_a_point_where_nothing_fits_gives_the_least_need_and_the_limit_in_whole_bytes():
    net, machine = load_network("resnet18"), load_machine("dgx-a100")
    row = point(net, "resnet18", 32, 2, machine, Roofline(machine), 2.0 ** 20, Settings())
    assert "fits" in row["error"] and row["limit_bytes"] == 2 ** 20 < row["need_bytes"]
    assert type(row["need_bytes"]) is int and type(row["limit_bytes"]) is int


def test_a_points_budget_names_its_own_bound_and_shares_the_stop():
    """A sweep's point searches its share of the bound; its messages ("no plan was found within the
    N s time limit") name that share, not the command's default, and a stop reaches it."""
    command = Budget(None, stated_s=20.0)
    point_budget = command.renewed(1.5, stated_s=1.5)
    assert (point_budget.seconds, point_budget.stated_s) == (1.5, 1.5)
    assert command.renewed(3.0).stated_s == 20.0  # the next search of a series keeps the bound it states
    command.request_stop()
    assert point_budget.stop_requested


@pytest.mark.parametrize("text,counts", [("1,2,4,...,1024", [2 ** k for k in range(11)]), ("3,9,...,81", [3, 9, 27, 81]),
                                         ("8,16,...,64,100", [8, 16, 32, 64, 100]), ("1,2,...,4", [1, 2, 4])])
def test_dots_multiply_on_to_the_end(text, counts):
    assert parse_counts(text) == counts


@pytest.mark.parametrize("text,says", [("8,16,...,12", "multiplies on to a larger end"),
                                       ("8,16,...,48", "multiplying by 2 does not reach 48"),
                                       ("2,3,...,9", "multiplies on to a larger end"), ("...,8", "cannot read")])
def test_dots_that_do_not_reach_their_end_are_refused(text, says):
    with pytest.raises(DnnplanError, match=says):
        parse_counts(text)
