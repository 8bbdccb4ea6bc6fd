"""Gradient accumulation without a pipeline (costmodel.step.prediction, ``micro_batches``): the layers at the
micro-batch's size, run M times; the gradient sync and update once; one micro-batch's activations."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine
from costmodel.step.pipeline import predict_pipeline
from costmodel.choices.precision import with_precision
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network

A100 = load_machine("dgx-a100")
ROOF = Roofline(A100)
runner = CliRunner()
NET = with_precision(load_network("gpt2"), "bf16")


def _step(batch: int, p: int, m: int = 1, **kw):
    strategies, _ = uniform_strategies(NET, p, batch // m, "data")
    return predict_step(NET, batch, strategies, default_algorithms(NET), A100, ROOF, "adam", micro_batches=m, **kw)


def test_accumulated_step_counts_by_hand():
    whole, micro, acc = _step(64, 8), _step(16, 8), _step(64, 8, 4)
    # the micro-batch's forward and backward four times, the sync and the update once
    assert acc.fwd_s == pytest.approx(4 * micro.fwd_s, rel=1e-12)
    assert acc.bwd_s == pytest.approx(4 * micro.bwd_s, rel=1e-12)
    assert acc.update_s == pytest.approx(whole.update_s, rel=1e-12) == pytest.approx(micro.update_s, rel=1e-12)
    assert acc.step_s == pytest.approx(4 * (micro.fwd_s + micro.bwd_s) + micro.sync_s + micro.update_s, rel=1e-12)
    # the gradient bytes reduced are the weights' whatever the batch: one reduction a step
    syncs = [[c.nbytes for x in s.layers for c in x.layer.comms if c.phase == "sync"] for s in (whole, acc)]
    assert syncs[0] == syncs[1] and sum(syncs[0]) > 0
    # memory: weights, gradients, master copy and Adam state as without accumulation; the
    # activations kept those of one micro-batch, a quarter of the whole batch's (gpt2's are linear in it)
    parts, whole_parts = acc.memory_parts, whole.memory_parts
    for k in ("weights", "grads", "master", "optimizer"):
        assert parts[k] == whole_parts[k]
    assert acc.activation_bytes * 4 == whole.activation_bytes
    assert acc.memory_peak_bytes == micro.memory_peak_bytes < whole.memory_peak_bytes
    assert (acc.batch, acc.micro_batch, acc.micro_batches) == (64, 16, 4)


def test_a_pipeline_of_one_stage_is_gradient_accumulation():
    def stage(net, ranks, micro, machine):
        strategies, _ = uniform_strategies(net, ranks, micro, "data")
        return predict_step(net, micro, strategies, default_algorithms(net), machine, ROOF, "adam")

    pipe = predict_pipeline(NET, 64, 8, 1, 4, "1f1b", A100, stage)
    acc = _step(64, 8, 4)
    assert pipe.step_s == pytest.approx(acc.step_s, rel=1e-12)
    assert pipe.memory_peak_bytes == acc.memory_peak_bytes


def test_micro_batches_must_divide_the_batch():
    with pytest.raises(DnnplanError, match="do not divide the batch 64"):
        _step(64, 8, 3)


def test_predict_accumulates_without_a_pipeline():
    args = ["predict", "gpt2", "-p", "8", "-b", "64", "--precision", "bf16", "--optimizer", "adam",
            "--machine", "dgx-a100", "--json"]
    acc = runner.invoke(app, args + ["--micro-batches", "4"])
    one = runner.invoke(app, args + ["--pipeline", "1", "--micro-batches", "4"])
    plain = runner.invoke(app, args)
    assert acc.exit_code == one.exit_code == plain.exit_code == 0, acc.output + one.output
    a, o, p = (json.loads(r.stdout) for r in (acc, one, plain))
    assert (a["micro_batches"], a["micro_batch"]) == (4, 16)
    assert a["step_s"] == pytest.approx(o["step_s"], rel=1e-12)
    assert a["memory_parts_bytes"]["activations"] * 4 == p["memory_parts_bytes"]["activations"]
    text = runner.invoke(app, args[:-1] + ["--micro-batches", "4"])
    assert "as 4 micro-batches of 16" in text.output
    bad = runner.invoke(app, args + ["--micro-batches", "3"])
    assert bad.exit_code == 2 and "do not divide the batch 64" in bad.output
