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
