"""`dnnplan predict` refuses, before pricing, a layout no framework runs (dnnplan.commands.predict
check_splits): one line naming the flag and a fix, exit 2, where it priced something cheaper or
silently ran the layers whole on every rank."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from tests.support.cli_errors import one_error_line

runner = CliRunner()


@pytest.mark.parametrize("args, says", [
    (["tiny-llama", "-p", "4", "--seq", "30", "--context", "4"],
     "--context 4 splits each causal sequence into 2 x 4 chunks (Megatron-Core's load balance), and 30 positions are "
     "not a multiple of 8 (give --seq a multiple of 8, e.g. 32)"),
    (["tiny-moe", "-p", "8", "--expert", "8"], "--expert 8 is more expert ranks than tiny-moe's 4 experts"),
    (["tiny-llama", "-p", "8", "-b", "16", "--micro-batches", "4"],
     "--micro-batches 4 leaves micro-batches of 4 samples for 8 data-parallel ranks (give at most --micro-batches 2"),
    (["tiny-llama", "-p", "8", "-b", "16", "--tensor", "2", "--micro-batches", "8"],
     "--micro-batches 8 leaves micro-batches of 2 samples for 4 data-parallel ranks"),
])
def test_a_layout_no_framework_runs_is_one_line(args, says):
    got = runner.invoke(app, ["predict", *args, "--machine", "dgx-h100"])
    assert got.exit_code == 2, got.output
    assert says in one_error_line(got)


def test_the_same_layouts_that_divide_are_priced():
    for args in (["tiny-llama", "-p", "4", "--seq", "32", "--context", "4"],
                 ["tiny-llama", "-p", "8", "-b", "16", "--micro-batches", "2"]):
        got = runner.invoke(app, ["predict", *args, "--machine", "dgx-h100"])
        assert got.exit_code == 0, got.output


def test_tensor_groups_that_cross_a_link_domain_are_warned_of():
    """gb200-nvl72's NVLink domain holds 72 GPUs: tensor groups of 16 over 144 ranks put one group
    across two domains, which the cost model prices as rank 0's (inside one); groups of 8 do not."""
    crossing = runner.invoke(app, ["predict", "tiny-llama", "-p", "144", "-b", "144", "--machine", "gb200-nvl72",
                                   "--tensor", "16"])
    assert crossing.exit_code == 0, crossing.output
    assert "warning: tensor groups of 16 ranks do not divide gb200-nvl72's 72-device link domain" in \
        " ".join(crossing.output.split())
    inside = runner.invoke(app, ["predict", "tiny-llama", "-p", "144", "-b", "144", "--machine", "gb200-nvl72",
                                 "--tensor", "8"])
    assert inside.exit_code == 0 and "link domain" not in inside.output
