"""Time and cost to train a token budget (costmodel.step.train_time), by hand."""

import pytest

from costmodel.step.train_time import parse_tokens, tokens_per_step, train_time
from networks.errors import DnnplanError
from networks.loader import load_network


def test_a_budget_is_whole_steps_at_the_step_on_every_device():
    got = train_time(step_s=2.0, tokens_per_step=4_000_000, devices=64, tokens=1e9, price_per_device_hour=3.0)
    assert got.steps == 250  # 1e9 / 4e6
    assert got.seconds == 500.0 and got.days == pytest.approx(500 / 86400)
    assert got.device_hours == pytest.approx(500 * 64 / 3600) and got.cost == pytest.approx(got.device_hours * 3)
    assert train_time(2.0, 4_000_000, 64, 1e9 + 1).steps == 251  # a part step is a step
    assert train_time(2.0, 4_000_000, 64, 1e9).cost is None  # no price, no cost


def test_tokens_read_with_their_suffix_and_a_step_takes_batch_times_sequence():
    assert parse_tokens("15T") == 15e12 and parse_tokens("300b") == 300e9 and parse_tokens("2e12") == 2e12
    assert parse_tokens("2.5M") == 2.5e6
    for bad in ("x1", "15Q", "0", "-3T", "1e30"):
        with pytest.raises(DnnplanError):
            parse_tokens(bad)
    gpt2 = load_network("gpt2")
    assert tokens_per_step(gpt2, 8) == 8 * 1024
    with pytest.raises(DnnplanError, match="reads no token ids"):
        tokens_per_step(load_network("resnet50"), 32)


def test_the_summary_line_reads_a_small_budget_in_its_own_units():
    """A budget of one step: "1 step", its seconds, its device-hours and cost to three figures (it read
    "1 steps", "2.56e-05 hours" and "0 device-hours, 0 at 2.5"); a large one in days and whole numbers."""
    from dnnplan.render.answer import train_line
    small = train_line(train_time(0.0923, 131072, 8, 1e3, 2.5))
    assert "1 step of 131,072 tokens, 0.0923 seconds on 8 devices (0.000205 device-hours, 0.000513 at 2.5" in small
    large = train_line(train_time(0.0923, 131072, 8, 15e12, 2.5))
    assert "114,440,918 steps" in large and "122.3 days" in large and "23,473 device-hours, 58,683 at 2.5" in large
    few = train_line(train_time(0.0923, 131072, 8, 3e11, 2.5))  # 2.447 days: three figures, not "2.4 days"
    assert "2.45 days" in few
