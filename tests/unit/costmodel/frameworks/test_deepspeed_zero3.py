"""DeepSpeed's ZeRO-3 step (costmodel.frameworks.deepspeed) and full recomputation's memory
(costmodel.memory.recompute)."""

from __future__ import annotations

import pytest

from costmodel.comm.collectives import allgather_s, reduce_scatter_s
from costmodel.calls.algorithms import RECOMPUTE, recompute_algorithms
from costmodel.compute.roofline import Roofline
from costmodel.frameworks.deepspeed import PERSISTENCE_THRESHOLD, sharded_tensors, zero3_step
from costmodel.machine.loading import load_machine
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.choices.precision import with_precision
from costmodel.memory.recompute import regenerated
from costmodel.step.prediction import predict_step
from networks.analysis import saved_outputs
from networks.loader import load_network
from networks.ops.base import prod

A100 = load_machine("dgx-a100")
ROOF = Roofline(A100)


def _gpt2_fp16():
    return with_precision(load_network("gpt2"), "fp16")


def test_only_weights_past_the_persistence_threshold_are_sharded_and_a_tied_head_gathers_the_table_again():
    net = _gpt2_fp16()
    tensors = sharded_tensors(net)
    big = [prod(s) * 2 for layer in net.layers for _, s in layer.weights if prod(s) >= PERSISTENCE_THRESHOLD]
    table = 2 * prod(dict(net.layer("embed").weights)["tokens"])
    assert sorted(tensors) == sorted(big + [table])  # the head's borrowed table, once more
    small = [prod(s) for layer in net.layers for _, s in layer.weights if prod(s) < PERSISTENCE_THRESHOLD]
    assert small  # layer norms and biases stay whole: nothing gathered for them


def _compute_step(net, ranks, micro, mode):
    strategies, fell = megatron_strategies(net, ranks, ranks * micro, 1)
    assert not fell
    return predict_step(net, ranks * micro, strategies, recompute_algorithms(net, mode), A100, ROOF,
                        Optimizer("adam", 3), checkpoints=mode == "full")


def test_zero3_step_is_its_formula_of_flat_rings_on_the_inter_node_link():
    net = _gpt2_fp16()
    ranks = 64
    compute = _compute_step(net, ranks, 2, "full")
    z = zero3_step(net, ranks, 3, compute, A100, recompute=True)
    tensors = sharded_tensors(net)
    g = sum(allgather_s(n, ranks, A100.inter, "ring") for n in tensors)
    r = sum(reduce_scatter_s(n, ranks, A100.inter, "ring") for n in tensors)
    cf = sum(x.layer.fwd_compute_s for x in compute.layers)
    cb = sum(x.layer.bwd_compute_s for x in compute.layers)
    assert z.gather_s == pytest.approx(g) and z.reduce_scatter_s == pytest.approx(r)
    assert z.step_s == pytest.approx(3 * (max(cf, g) + max(cb, 2 * g) + r) + compute.update_s)
    assert z.exposed_comm_s >= r * 3 - 1e-12
    # never faster than dnnplan's own ZeRO-3 pricing of the same collectives (two-level algorithms)
    own = sum(c.seconds for x in compute.layers for c in x.layer.comms if c.purpose in ("param_gather", "grad_sync"))
    assert z.gather_s * 2 + z.reduce_scatter_s >= own * 0.99
    without = zero3_step(net, ranks, 3, compute, A100, recompute=False)
    assert without.step_s <= z.step_s and without.gathers_in_backward == 1
    # the terms every breakdown names sum to the step; exposed and overlapped to every collective's time
    terms = dict(z.terms())
    assert sum(terms.values()) == pytest.approx(z.step_s) and terms["gradient sync"] == pytest.approx(3 * r)
    assert z.comm_exposed_s + z.comm_overlapped_s == pytest.approx(3 * (3 * g + r))


def test_step_time_stops_shrinking_with_more_ranks_once_the_gathers_bind():
    """Table 2's shape: a volume per GPU that does not shrink with the ranks."""
    net = _gpt2_fp16()
    steps = [zero3_step(net, n, 1, _compute_step(net, n, 1, "full"), A100, True) for n in (64, 128, 256)]
    assert steps[2].step_s > 0.9 * steps[1].step_s  # not halved
    assert all(s.gather_s > s.fwd_compute_s for s in steps[1:])


def test_full_recomputation_keeps_each_block_input_and_nothing_inside():
    net = _gpt2_fp16()
    algorithms = recompute_algorithms(net, "full")
    dropped = regenerated(net, algorithms)
    saved = saved_outputs(net)
    assert "h0.fc" in dropped and "h0.attn" in dropped
    assert "h0.add2" not in dropped and "h11.add2" not in dropped  # read by the next block / the final norm
    assert all(algorithms[name] == RECOMPUTE for name in dropped)
    strategies, _ = megatron_strategies(net, 8, 8, 1)
    per_layer = predict_step(net, 8, strategies, algorithms, A100, ROOF, "adam")
    blocks = predict_step(net, 8, strategies, algorithms, A100, ROOF, "adam", checkpoints=True)
    assert blocks.step_s == pytest.approx(per_layer.step_s)  # the same work, priced once per layer
    kept_then = per_layer.memory_parts["activations"]
    kept_now = blocks.memory_parts["activations"]
    freed = sum(8 // 8 * prod(net.layer(n).out_shape) * 2 for n in dropped if saved[n])
    assert kept_then - kept_now == freed > 0
    assert blocks.recompute_bytes > 0  # one block regenerated while its backward runs
    assert blocks.memory_peak_bytes < per_layer.memory_peak_bytes
    selective = recompute_algorithms(net, "selective")
    assert regenerated(net, selective) == set()  # attention's output is read by its dropout, not recomputed


def test_predict_runtime_deepspeed_prices_the_zero3_step_and_refuses_other_configurations():
    import json

    from typer.testing import CliRunner

    from dnnplan.cli import app
    runner = CliRunner()
    args = ["predict", "gpt2", "-p", "64", "-b", "256", "--machine", "dgx-a100", "--precision", "fp16",
            "--optimizer", "adam", "--zero", "3", "--recompute", "full", "--micro-batches", "2"]
    got = runner.invoke(app, args + ["--runtime", "deepspeed", "--json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.output[got.output.index("{"):])
    net = _gpt2_fp16()
    strategies, _ = megatron_strategies(net, 64, 128, 1)
    compute = predict_step(net, 128, strategies, recompute_algorithms(net, "full"), A100, ROOF,
                           Optimizer("adam", 3), checkpoints=True)
    want = zero3_step(net, 64, 2, compute, A100, recompute=True)
    assert out["step_s"] == pytest.approx(want.step_s, rel=1e-12) and out["micro_batches"] == 2
    assert out["gathers_in_backward"] == 2 and out["exposed_comm_s"] > 0
    text = runner.invoke(app, args + ["--runtime", "deepspeed"])
    assert text.exit_code == 0 and "DeepSpeed ZeRO-3" in text.output
    for wrong, message in ((["--zero", "2"], "--runtime deepspeed prices"), (["--tensor", "8"], "no --tensor"),
                           (["--runtime", "tensorflow"], "unknown --framework 'tensorflow'")):
        bad = runner.invoke(app, args[:-2] + wrong + (["--runtime", "deepspeed"] if "--runtime" not in wrong else []))
        assert bad.exit_code == 2 and message in bad.output, bad.output


def test_the_framework_choice_names_deepspeed_as_runtime_did_and_refuses_a_conflict():
    """--framework is the training choice (costmodel.choices.training.TrainingChoices.framework);
    --runtime, its earlier name, sets the same choice: the same step, and one line when the two
    differ or the name is unknown."""
    import json

    from typer.testing import CliRunner

    from dnnplan.cli import app
    runner = CliRunner()
    args = ["predict", "gpt2", "-p", "64", "-b", "256", "--precision", "fp16", "--optimizer", "adam", "--zero", "3",
            "--json"]
    by_framework = runner.invoke(app, args + ["--framework", "deepspeed"])
    by_runtime = runner.invoke(app, args + ["--runtime", "deepspeed"])
    assert by_framework.exit_code == 0 and by_runtime.exit_code == 0, by_framework.output
    assert json.loads(by_framework.output) == json.loads(by_runtime.output)
    assert json.loads(by_framework.output)["runtime"] == "deepspeed"
    dnnplan = runner.invoke(app, args + ["--framework", "dnnplan"])
    assert "runtime" not in json.loads(dnnplan.output)  # dnnplan's own step, per layer
    for wrong, message in ((["--framework", "tensorflow"], "unknown --framework 'tensorflow' (shipped frameworks: "),
                           (["--framework", "dnnplan", "--runtime", "deepspeed"], "name different frameworks"),
                           (["--framework", "deepspeed", "--zero", "1"], "--framework deepspeed prices")):
        bad = runner.invoke(app, args + wrong)
        assert bad.exit_code == 2 and message in bad.output, bad.output
    # the planner's per-layer search does not price DeepSpeed's step: planned under it, its answer
    # was the ideal framework's, faster than `predict` of the same layout
    planned = runner.invoke(app, ["plan", "gpt2", "-p", "64", "-b", "256", "--zero", "3", "--framework", "deepspeed"])
    assert planned.exit_code == 2 and "one layout the planner does not search" in planned.output, planned.output
    assert "dnnplan predict NETWORK --framework deepspeed --zero 3" in planned.output
    swept = runner.invoke(app, ["plan", "gpt2", "--sweep", "8,16", "-m", "dgx-h100", "--zero", "3", "--framework",
                                "deepspeed"])  # a sweep's points too, in one line before any is planned
    assert swept.exit_code == 2 and "one layout the planner does not search" in swept.output, swept.output


def test_a_deepspeed_step_over_the_devices_memory_says_it_does_not_fit():
    """As every other step: Llama 3 8B under ZeRO-3 in 4 micro-batches on 64 H100s peaks at 85.84 GiB
    a device, over their 79.65 (it said the peak alone), with its model FLOP utilisation and machine."""
    import json

    from typer.testing import CliRunner

    from dnnplan.cli import app
    args = ["predict", "llama3-8b", "-p", "64", "-m", "dgx-h100", "--framework", "deepspeed", "--zero", "3",
            "--micro-batches", "4"]
    text = CliRunner().invoke(app, args)
    said = " ".join(text.output.split())  # the console wraps its lines
    assert text.exit_code == 0 and "85.84 GiB a device (over the limit of 79.65 GiB: it does not fit)" in said
    assert "model FLOP utilisation" in said and "on 64 x dgx-h100" in said
    out = json.loads(CliRunner().invoke(app, args + ["--json"]).stdout)
    assert out["fits"] is False and out["machine"] == "dgx-h100" and 0 < out["mfu"] < 1
    assert out["memory_limit_bytes"] == 81_559 * 2 ** 20 < out["memory_peak_bytes"]
