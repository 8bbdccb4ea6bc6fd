"""Activation recomputation as a per-layer choice (costmodel.calls.algorithms.RECOMPUTE): a layer that keeps
internals of its own for backward may drop them and run its forward again in backward."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from costmodel.choices.training import TrainingChoices
from costmodel.calls.algorithms import RECOMPUTE, recompute_algorithms, recompute_applies
from costmodel.memory.recompute import checkpointed_blocks, regenerated
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.machine.loading import load_machine
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network, zoo_names
from planner.problem.build import build_problem
from planner.problem.solve import Settings, make_plan
from planner.solvers.problem import min_memory

A100 = load_machine("dgx-a100")
ROOF = Roofline(A100)
runner = CliRunner()


def test_recomputing_attention_trades_its_internals_for_one_more_forward():
    attn = load_network("gpt2").layer("h0.attn")
    strat = make_strategy(1, {})
    keep = layer_estimate(attn, strat, 4, A100, ROOF, "materialized")
    again = layer_estimate(attn, strat, 4, A100, ROOF, "materialized+recompute")
    from costmodel.parallel.shard import local_layer
    internals = local_cost(local_layer(attn, strat, 4)).activation_bytes  # q, k, v, probabilities, heads
    assert internals > 0
    assert keep.memory.activations - again.memory.activations == internals
    assert again.bwd_data_s == pytest.approx(keep.bwd_data_s + keep.fwd_compute_s, rel=1e-12)
    assert (again.fwd_compute_s, again.bwd_weights_s) == (keep.fwd_compute_s, keep.bwd_weights_s)
    # the machine's default kernel (flash on an A100) recomputed: RECOMPUTE alone names it
    flash, flash_again = (layer_estimate(attn, strat, 4, A100, ROOF, a) for a in ("", RECOMPUTE))
    assert (flash.algorithm, flash_again.algorithm) == ("flash", "flash+recompute")
    assert flash_again.bwd_data_s == pytest.approx(flash.bwd_data_s + flash.fwd_compute_s, rel=1e-12)
    # flash keeps q, k, v and the heads' output and a float32 statistic per query and head
    assert flash.memory.activations - flash_again.memory.activations == internals - 4 * 12 * 1024 * 1024 * 4 \
        + 4 * 12 * 1024 * 4


def test_recompute_applies_only_where_a_layer_keeps_internals():
    net = load_network("gpt2")
    ops = {layer.op for layer in net.layers if recompute_applies(layer)}
    assert ops == {"attention", "dropout", "softmax_cross_entropy"}  # not norms: their statistics are tiny
    assert not recompute_applies(load_network("resnet50").layer("conv1"))


def test_the_planner_recomputes_only_when_memory_binds():
    net = load_network("alexnet")  # its max pools keep int64 indices, its dropouts masks
    free = make_plan(net, "alexnet", 256, 2, A100, ROOF, with_baselines=False)
    assert RECOMPUTE not in free.algorithms().values()
    def least(recompute: bool) -> float:  # the least memory any plan needs, with or without recomputation
        return min_memory(build_problem(net, 256, 2, A100, ROOF, None, edges=False, recompute=recompute).problem)[0]

    assert least(True) < least(False)
    limit = (least(True) + least(False)) / 2  # only recomputing plans fit
    tight = make_plan(net, "alexnet", 256, 2, A100, ROOF, limit, with_baselines=False)
    assert RECOMPUTE in tight.algorithms().values()
    assert tight.memory_peak_bytes <= limit and tight.step_s > free.step_s
    with pytest.raises(DnnplanError, match="no plan of alexnet"):
        make_plan(net, "alexnet", 256, 2, A100, ROOF, limit, Settings(choices=TrainingChoices(recompute="none")),
                  with_baselines=False)


def test_plan_file_takes_recompute_where_it_applies_and_the_executor_refuses_it(tmp_path):
    out = tmp_path / "p.yaml"
    assert runner.invoke(app, ["plan", "lenet5", "-p", "2", "--out", str(out)]).exit_code == 0
    data = yaml.safe_load(out.read_text())
    loss = next(layer for layer in data["layers"] if layer["name"] == "loss")
    loss["algorithm"] = RECOMPUTE
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    assert runner.invoke(app, ["predict", str(out)]).exit_code == 0
    refused = runner.invoke(app, ["execute", str(out), "--ranks", "2"])
    assert refused.exit_code == 2 and "--no-recompute" in refused.output
    relu = next(layer for layer in data["layers"] if layer["name"] == "relu1")
    relu["algorithm"] = RECOMPUTE
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    bad = runner.invoke(app, ["predict", str(out)])
    assert bad.exit_code == 2 and "nothing to recompute" in bad.output


def test_a_block_recomputed_whole_is_checkpointed_at_its_input_and_a_layer_alone_is_not():
    net = load_network("tiny-llama")
    full = recompute_algorithms(net, "full")
    assert checkpointed_blocks(net, full) == {"h0", "h1"}
    assert "h0.norm1" in regenerated(net, full) and "h0.add2" not in regenerated(net, full)  # h1 reads it
    attention_only = recompute_algorithms(net, "selective")
    assert checkpointed_blocks(net, attention_only) == set() and regenerated(net, attention_only) == set()
    first = {name: a for name, a in full.items() if name.startswith("h0.")}  # Megatron's block method, k = 1
    assert checkpointed_blocks(net, first) == {"h0"}
    assert not any(name.startswith("h1.") for name in regenerated(net, first))
    partial = {name: a for name, a in full.items() if name != "h1.add2"}
    assert checkpointed_blocks(net, partial) == {"h0"}  # h1 lacks one layer: each recomputed alone
    cnn = load_network("lenet5")  # no blocks: the layers outside every block, convolutions and loss aside
    assert checkpointed_blocks(cnn, recompute_algorithms(cnn, "full")) == {None}


@pytest.mark.parametrize("name", zoo_names())
def test_the_planners_per_layer_recomputation_never_makes_a_block_whole(name):
    """The planner weighs recomputation layer by layer (only where a layer keeps internals of its own,
    costmodel.layer.candidates) and prices each recomputed layer keeping its output; a plan file is
    priced with a block recomputed whole checkpointed at its input. Every block (and the layers
    outside them) has a layer the planner never recomputes, so the two agree on every plan it makes."""
    net = load_network(name)
    planner_may = {layer.name: RECOMPUTE for layer in net.layers if recompute_applies(layer)}
    assert checkpointed_blocks(net, planner_may) == set()


def test_a_plan_of_full_recomputation_reads_back(tmp_path):
    """Full recomputation recomputes a block's norms and adds (nothing of their own to drop, but their
    outputs regenerated): the plan `predict --recompute full --out` writes reads back and prices as
    the flags; a norm recomputed alone is still refused."""
    for name in ("tiny-llama", "lenet5"):
        out = tmp_path / f"{name}.yaml"
        flags = [name, "-p", "2", "--recompute", "full", "--json"]
        assert runner.invoke(app, ["predict", *flags, "--out", str(out)]).exit_code == 0
        read_back, by_flags = (runner.invoke(app, ["predict", *args]) for args in ([str(out), "--json"], flags))
        assert read_back.exit_code == 0, read_back.output
        got, want = (yaml.safe_load(r.stdout) for r in (read_back, by_flags))
        assert (got["step_s"], got["memory_peak_bytes"]) == (want["step_s"], want["memory_peak_bytes"])
    data = yaml.safe_load((tmp_path / "tiny-llama.yaml").read_text())
    for layer in data["layers"]:
        if layer["name"] != "h0.norm1":
            layer["algorithm"] = "flash" if layer["name"].endswith("attn") else ""
    (tmp_path / "alone.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    bad = runner.invoke(app, ["predict", str(tmp_path / "alone.yaml")])
    assert bad.exit_code == 2 and "nothing to recompute unless every layer of block h0" in bad.output
