"""Pipeline parallelism (costmodel.pipeline): stages, micro-batches, the bubble, GPipe and 1F1B."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.compute import Roofline, default_algorithms
from costmodel.files import load_machine
from costmodel.pipeline import balanced_stages, predict_pipeline
from costmodel.step import predict_step
from costmodel.uniform import uniform_strategies
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network

A100 = load_machine("dgx-a100")
ROOF = Roofline(A100)
runner = CliRunner()


def _stage(net, ranks, micro):
    strategies, _ = uniform_strategies(net, ranks, micro, "data")
    return predict_step(net, micro, strategies, default_algorithms(net), A100, ROOF)


def test_stages_are_contiguous_cover_every_layer_and_balance_flops():
    net = load_network("gpt2")
    for s in (1, 2, 4, 12):
        cuts = balanced_stages(net, s)
        assert len(cuts) == s and all(cuts)
        assert [layer.name for stage in cuts for layer in stage] == [layer.name for layer in net.layers]
    with pytest.raises(DnnplanError, match="stages"):
        balanced_stages(net, len(net.layers) + 1)


def test_one_stage_one_micro_batch_is_the_plain_step():
    net = load_network("gpt2")
    pipe = predict_pipeline(net, 16, 8, 1, 1, "1f1b", A100, _stage)
    assert pipe.step_s == pytest.approx(_stage(net, 8, 16).step_s, rel=1e-12)
    assert pipe.bubble_s == 0


def test_step_is_fill_and_drain_plus_the_slowest_stage_per_further_micro_batch():
    net = load_network("gpt2")
    pipe = predict_pipeline(net, 64, 16, 4, 8, "1f1b", A100, _stage)
    t = [s.per_micro_s for s in pipe.stages]
    assert pipe.step_s == pytest.approx(sum(t) + 7 * max(t) + max(s.once_s for s in pipe.stages), rel=1e-12)
    assert [s.ranks for s in pipe.stages] == [4] * 4
    assert pipe.stages[-1].p2p_s == 0 and all(s.p2p_s > 0 for s in pipe.stages[:-1])
    # more micro-batches shrink the bubble's share
    more = predict_pipeline(net, 64, 16, 4, 32, "1f1b", A100, _stage)
    assert more.bubble_fraction < pipe.bubble_fraction


def test_1f1b_keeps_fewer_micro_batches_than_gpipe():
    net = load_network("gpt2")
    one = predict_pipeline(net, 64, 16, 4, 8, "1f1b", A100, _stage)
    gpipe = predict_pipeline(net, 64, 16, 4, 8, "gpipe", A100, _stage)
    assert [s.kept_micro_batches for s in one.stages] == [4, 3, 2, 1]
    assert [s.kept_micro_batches for s in gpipe.stages] == [8] * 4
    assert one.step_s == pytest.approx(gpipe.step_s, rel=1e-12)
    assert one.memory_peak_bytes < gpipe.memory_peak_bytes
    stage0 = one.stages[0]
    parts = stage0.micro.memory_parts
    assert stage0.memory_peak_bytes == sum(parts.values()) + 3 * parts["activations"]


@pytest.mark.parametrize("args, message", [
    (["--devices", "6", "--pipeline", "4"], "do not divide 6 devices"),
    (["--devices", "8", "--batch", "10", "--pipeline", "2", "--micro-batches", "4"], "do not divide the batch 10"),
    (["--devices", "8", "--pipeline", "2", "--schedule", "zb"], "unknown --schedule"),
])
def test_pipeline_mistakes_are_one_line(args, message):
    result = runner.invoke(app, ["predict", "gpt2", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_predict_pipeline_json():
    result = runner.invoke(app, ["predict", "gpt2", "--devices", "8", "--pipeline", "2", "--micro-batches", "4",
                                 "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data["stages"]) == 2 and data["stages"][1]["last_layer"] == "loss"
    assert 0 < data["bubble_fraction"] < 1
