"""`dnnplan predict` refuses, before pricing, a layout no framework runs (dnnplan.commands.predict
check_splits): one line naming the flag and a fix, exit 2, where it priced something cheaper or
silently ran the layers whole on every rank."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from tests.support.cli_errors import one_error_line
from tests.support.paths import ROOT

runner = CliRunner()


@pytest.mark.parametrize("args, says", [
    (["tiny-moe", "-p", "8", "--expert", "8"], "--expert 8 is more expert ranks than tiny-moe's 4 experts"),
    (["tiny-llama", "-p", "8", "-b", "16", "--micro-batches", "4"],
     "--micro-batches 4 leaves micro-batches of 4 samples for 8 data-parallel ranks (give at most --micro-batches 2"),
    (["tiny-llama", "-p", "8", "-b", "16", "--tensor", "2", "--micro-batches", "8"],
     "--micro-batches 8 leaves micro-batches of 2 samples for 4 data-parallel ranks"),
    # sequence parallelism over positions the tensor group cannot cut evenly: priced, it fell back
    # to all-reduces and reshards, 24% slower and 50% more memory at 8190 positions than at 8192
    (["llama3-8b", "-p", "8", "-b", "8", "--tensor", "8", "--sequence-parallel", "--seq", "8190"],
     "--sequence-parallel cuts the 8190 positions over --tensor 8 = 8 ranks, which do not divide them "
     "(Megatron-LM asserts they do) (give --seq a multiple of 8 (e.g. --seq 8192)"),
    (["llama3-8b", "-p", "16", "-b", "2", "--tensor", "8", "--context", "2", "--sequence-parallel", "--seq", "8184"],
     "over --tensor 8 x --context 2 = 16 ranks, which do not divide them"),
])
def test_a_layout_no_framework_runs_is_one_line(args, says):
    got = runner.invoke(app, ["predict", *args, "--machine", "dgx-h100"])
    assert got.exit_code == 2, got.output
    assert says in one_error_line(got)


def test_a_context_split_not_in_2c_equal_chunks_is_priced_at_its_straggler_and_warned_of():
    """llama3-8b at 8191 positions over --context 2: dnnplan's executor runs it (the last rank's chunks
    short), priced at the straggler's ceil(S / C) positions, as 8192 is to within 0.1% (it was priced
    15% faster, the split taken as none); Megatron-LM and torchtitan need a multiple of 2C: warned."""
    import json  # noqa: PLC0415 - this test's only use
    args = ["predict", "llama3-8b", "-p", "64", "--machine", "dgx-h100", "--context", "2", "--json"]
    odd, even = (runner.invoke(app, [*args, "--seq", str(seq)]) for seq in (8191, 8192))
    assert odd.exit_code == 0 and even.exit_code == 0, odd.output
    odd_s, even_s = json.loads(odd.stdout)["step_s"], json.loads(even.stdout)["step_s"]
    assert abs(odd_s / even_s - 1) < 1e-3
    assert "--context 2 on 8191 positions: Megatron-LM and torchtitan split a causal sequence into 2 x 2 equal " \
           "chunks, so they need a multiple of 4 (e.g. --seq 8192)" in " ".join(odd.stderr.split())
    assert "Megatron-LM and torchtitan" not in even.stderr


def test_the_same_layouts_that_divide_are_priced():
    for args in (["tiny-llama", "-p", "4", "--seq", "32", "--context", "4"],
                 ["tiny-llama", "-p", "8", "-b", "16", "--micro-batches", "2"]):
        got = runner.invoke(app, ["predict", *args, "--machine", "dgx-h100"])
        assert got.exit_code == 0, got.output


def test_tensor_groups_that_cross_a_link_domain_are_warned_of():
    """gb200-nvl72's NVLink domain holds 72 GPUs: tensor groups of 16 over 144 ranks put one group
    across two domains, which the step waits for; groups of 8 do not."""
    crossing = runner.invoke(app, ["predict", "tiny-llama", "-p", "144", "-b", "144", "--machine", "gb200-nvl72",
                                   "--tensor", "16"])
    assert crossing.exit_code == 0, crossing.output
    assert "warning: tensor groups of 16 ranks do not divide gb200-nvl72's 72-device link domain" in \
        " ".join(crossing.output.split())
    inside = runner.invoke(app, ["predict", "tiny-llama", "-p", "144", "-b", "144", "--machine", "gb200-nvl72",
                                 "--tensor", "8"])
    assert inside.exit_code == 0 and "link domain" not in inside.output


def test_expert_groups_that_cross_a_link_domain_are_warned_of_and_a_strided_context_group_too():
    """Expert groups of 16 over 144 GB200s put ranks 64-79 across racks 0 and 1 as tensor groups do;
    context groups of 2 beside tensor groups of 8 pair ranks 8 apart (64 and 72 among them): 2
    divides 72, and still some groups cross."""
    args = ["predict", "qwen3-30b-a3b", "-p", "144", "-b", "144", "--machine", "gb200-nvl72"]
    experts = runner.invoke(app, [*args, "--expert", "16"])
    assert experts.exit_code == 0, experts.output
    assert ("warning: expert groups of 16 ranks do not divide gb200-nvl72's 72-device link domain: some groups "
            "cross 2 domains where rank 0's lies in 1") in " ".join(experts.output.split())
    context = runner.invoke(app, [*args, "--tensor", "8", "--context", "2"])
    assert context.exit_code == 0, context.output
    text = " ".join(context.output.split())
    assert ("warning: some context groups of 2 ranks cross 2 of gb200-nvl72's 72-device link domains where rank 0's "
            "lies in 1") in text
    assert "tensor groups" not in text  # groups of 8 from multiples of 8: each inside a domain
    inside = runner.invoke(app, [*args, "--expert", "8"])
    assert inside.exit_code == 0 and "link domain" not in inside.output


def test_a_plan_file_and_a_launch_file_that_cross_a_link_domain_are_warned_of_as_the_flags_are(tmp_path):
    plan = tmp_path / "p.yaml"
    made = runner.invoke(app, ["predict", "qwen3-30b-a3b", "-p", "144", "-b", "144", "--machine", "gb200-nvl72",
                               "--expert", "16", "--out", str(plan)])
    assert made.exit_code == 0, made.output
    words = "warning: expert groups of 16 ranks do not divide gb200-nvl72's 72-device link domain"
    again = runner.invoke(app, ["predict", str(plan)])
    assert again.exit_code == 0 and words in " ".join(again.output.split()), again.output
    launch = tmp_path / "launch.sh"
    exported = runner.invoke(app, ["export", str(plan), "--to", "megatron", "--out", str(launch)])
    assert exported.exit_code == 0, exported.output
    read = runner.invoke(app, ["predict", "--from", str(launch)])
    assert read.exit_code == 0 and words in " ".join(read.output.split()), read.output


def test_tensor_groups_that_cross_a_link_domain_are_priced_over_the_link_between(tmp_path):
    """As warned: the same layout on a machine whose one domain holds all 144 GPUs is faster (its
    tensor groups all on NVLink), where on 72-GPU domains the groups of ranks 64-79 wait on InfiniBand."""
    text = (ROOT / "costmodel" / "machine" / "gb200-nvl72.yaml").read_text()
    one = tmp_path / "one-domain.yaml"
    one.write_text(text.replace("devices_per_nvlink_domain: 72", "devices_per_nvlink_domain: 144")
                   .replace("name: gb200-nvl72", "name: one-domain"))
    args = ["predict", "tiny-llama", "-p", "144", "-b", "144", "--tensor", "16", "--json", "--machine"]
    racks, whole = (json.loads(runner.invoke(app, [*args, m]).stdout) for m in ("gb200-nvl72", str(one)))
    assert racks["step_s"] > whole["step_s"] * 1.01


@pytest.mark.parametrize("spec, words", [
    ("N=4,F=2", "--strategy N=4,F=2: the degrees' product '4x2 = 8' does not divide 6 devices"),
    ("N=3,X=2", "--strategy N=3,X=2: unknown dimension(s) X"),
    ("N=0,F=6", "--strategy N=0,F=6: degree of N must be positive, got 0 (N=1 leaves N unsplit"),
    ("N=3,,F=2", "--strategy N=3,,F=2: strategy 'N=3,,F=2' has an empty item"),
])
def test_a_strategy_of_degrees_that_cannot_be_is_refused_naming_the_flag(spec, words):
    assert words in one_error_line(runner.invoke(app, ["predict", "gpt-tiny", "-p", "6", "-s", spec]))


def test_a_context_degree_that_cannot_split_is_one_line_not_a_warning_about_it_first():
    got = runner.invoke(app, ["predict", "gpt-tiny", "-p", "8", "--context", "3"])
    assert "the context-parallel degree 3 does not divide the 8 devices --tensor leaves" in one_error_line(got)
    assert "warning" not in got.output
