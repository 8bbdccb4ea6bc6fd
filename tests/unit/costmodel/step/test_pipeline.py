"""Pipeline parallelism (costmodel.step.pipeline): stages, micro-batches, the bubble, GPipe and 1F1B."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine

from costmodel.frameworks.megatron import megatron_strategies
from costmodel.step.pipeline import balanced_stages, predict_pipeline
from profiler import context
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.analysis import layer_cost
from networks.loader import load_network

from tests.support.paths import ZOO

A100 = load_machine("dgx-a100")
ROOF = Roofline(A100)
runner = CliRunner()


def _stage(net, ranks, micro, machine=A100):
    strategies, _ = uniform_strategies(net, ranks, micro, "data")
    return predict_step(net, micro, strategies, default_algorithms(net), machine, ROOF)


def test_stages_are_contiguous_cover_every_layer_and_balance_flops():
    """Each stage's training FLOPs are within one layer's of an equal share (a cut moves by whole
    layers); GPT-2's 2 and 4 stages within 10% of it (its largest layer, the LM head, is 27% of
    the whole)."""
    net = load_network("gpt2")
    flops = {layer.name: max(sum(layer_cost(layer, 1).flops), 1) for layer in net.layers}
    total, largest = sum(flops.values()), max(flops.values())
    for s in (1, 2, 4, 12):
        cuts = balanced_stages(net, s)
        assert len(cuts) == s and all(cuts)
        assert [layer.name for stage in cuts for layer in stage] == [layer.name for layer in net.layers]
        each = [sum(flops[layer.name] for layer in stage) for stage in cuts]
        assert all(abs(f - total / s) <= largest for f in each), each
        if s in (2, 4):
            assert all(abs(f - total / s) <= 0.1 * total / s for f in each), each
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
    assert stage0.memory_peak_bytes == sum(parts.values()) + 3 * stage0.micro.activation_bytes


@pytest.mark.parametrize("args, message", [
    (["--devices", "6", "--pipeline", "4"], "do not divide 6 devices"),
    (["--devices", "8", "--batch", "10", "--pipeline", "2", "--micro-batches", "4"], "do not divide the batch 10"),
    (["--devices", "8", "--pipeline", "2", "--schedule", "zb"], "unknown --schedule"),
    (["--devices", "4", "--pipeline", "2", "--micro-batches", "2", "--tensor", "3"],
     "4 devices over 2 pipeline stages leave 2 a stage: the tensor-parallel degree 3 does not divide 2 devices "
     "(give --tensor a divisor of --devices / --pipeline)"),
])
def test_pipeline_mistakes_are_one_line(args, message):
    result = runner.invoke(app, ["predict", "gpt2", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_a_stage_micro_batch_smaller_than_its_ranks_is_refused():
    """tiny-llama's micro-batch of 1 over a stage's 2 ranks: its layers could not split it and would
    run replicated on each rank, a layout no framework runs; --micro-batches is refused with the most
    that splits (it was priced, replicated, with exit 0)."""
    got = runner.invoke(app, ["predict", "tiny-llama", "-p", "4", "-b", "8", "--pipeline", "2", "--micro-batches", "8"])
    assert got.exit_code == 2 and "--micro-batches 8 leaves micro-batches of 1 sample for 2 data-parallel ranks " \
        "(give at most --micro-batches 4" in " ".join(got.output.split())


def test_predict_pipeline_json():
    result = runner.invoke(app, ["predict", "gpt2", "--devices", "8", "--pipeline", "2", "--micro-batches", "4",
                                 "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["stages"]) == 2 and data["stages"][1]["last_layer"] == "loss"
    assert 0 < data["bubble_fraction"] < 1
    # each stage's layers and its peak by part (the 1F1B micro-batches it keeps counted in the
    # activations); the step's parts are the fullest stage's
    for stage in data["stages"]:
        assert [x["name"] for x in stage["layers"]][0] == ("embed" if stage["stage"] == 0 else "h6.ln1")
        assert sum(stage["memory_parts_bytes"].values()) == stage["memory_peak_bytes"]
    assert data["memory_parts_bytes"] == max(data["stages"], key=lambda s: s["memory_peak_bytes"])["memory_parts_bytes"]
    text = runner.invoke(app, ["predict", "gpt2", "--devices", "8", "--pipeline", "2", "--micro-batches", "4",
                               "--layers"]).output
    assert "stage 0 (4 devices), per layer, one micro-batch" in text and "stage 1 (4 devices)" in text
    assert "(stage 1, the peak's)" in text or "(stage 0, the peak's)" in text


GPT = "gpt-tiny"
ZOO_TINY = ZOO / "gpt-tiny.yaml"


# ---------------------------------------------------------------------------------------------
# interleaved 1F1B (priced by dnnplan predict)

@pytest.mark.parametrize("stages,s,m,chunks,want", [
    (4, 0, 8, 1, 4), (4, 3, 8, 1, 1),  # 1F1B: S - s
    (4, 0, 8, 2, (2 * 3 + 1 * 4 + 1) / 2), (4, 3, 8, 2, (0 + 4 + 1) / 2),  # Megatron's warm-up + 1, in chunk shares
    (4, 0, 4, 2, 4), (4, 1, 4, 3, 4),  # m = S: every micro-batch's chunks warm up first
    (8, 0, 16, 3, (2 * 7 + 2 * 8 + 1) / 3)])
def test_the_interleaved_schedule_keeps_megatrons_warm_up_of_chunk_forwards(stages, s, m, chunks, want):
    from costmodel.step.pipeline import kept_micro_batches
    assert kept_micro_batches("interleaved" if chunks > 1 else "1f1b", stages, s, m, chunks) == pytest.approx(want)


def test_interleaving_gives_each_device_every_s_th_chunk_and_shrinks_the_bubble(tmp_path):
    text = (ZOO_TINY).read_text().replace("repeat: 2", "repeat: 4")
    spec = tmp_path / "gpt4.yaml"
    spec.write_text(text)
    ctx = context.resolve(str(spec), 4, 8, "dgx-a100")

    def stage(net, ranks, micro, machine):
        from costmodel.step.prediction import predict_step
        strategies, _ = megatron_strategies(net, ranks, micro, 1)
        return predict_step(net, micro, strategies, {}, machine, ctx.compute)

    from costmodel.step.pipeline import predict_pipeline
    pred = predict_pipeline(ctx.network, 8, 4, 2, 4, "interleaved", ctx.machine, stage, chunks=2)
    names = [{row.layer.name for row in st.micro.layers} for st in pred.stages]
    assert {"h0.ln1", "h2.ln1", "embed"} <= names[0] and {"h1.ln1", "h3.ln1", "loss"} <= names[1]
    assert not names[0] & names[1]
    t = [st.per_micro_s for st in pred.stages]
    assert pred.bubble_s == pytest.approx((sum(t) - max(t)) / 2)
    assert pred.step_s == pytest.approx(4 * max(t) + (sum(t) - max(t)) / 2 + max(st.once_s for st in pred.stages))
    plain = predict_pipeline(ctx.network, 8, 4, 2, 4, "1f1b", ctx.machine, stage)
    assert pred.stages[0].p2p_s > plain.stages[0].p2p_s  # two sends each way a micro-batch instead of one
    assert pred.bubble_s < plain.bubble_s


@pytest.mark.parametrize("args,needle", [
    (["--micro-batches", "6", "--schedule", "interleaved", "--chunks", "2"], "not a multiple"),
    (["--micro-batches", "4", "--chunks", "2"], "--chunks 2 cuts each device's layers into model chunks"),
    (["--micro-batches", "4", "--schedule", "interleaved"], "needs 2 or more model chunks a device, got --chunks 1"),
])
def test_predict_refuses_an_interleaving_it_cannot_run_in_one_line(args, needle):
    result = CliRunner().invoke(app, ["predict", GPT, "-p", "4", "-b", "12", "--machine", "dgx-a100",
                                      "--pipeline", "4", *args])
    assert result.exit_code == 2 and needle in result.output, result.output


def test_predict_prices_interleaving_and_plan_says_when_the_blocks_cannot_interleave():
    ok = CliRunner().invoke(app, ["predict", GPT, "-p", "2", "-b", "8", "--machine", "dgx-a100", "--pipeline", "2",
                                  "--micro-batches", "4", "--schedule", "interleaved", "--chunks", "2", "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["chunks"] == 2 and data["schedule"] == "interleaved"
    refused = CliRunner().invoke(app, ["plan", GPT, "-p", "2", "-b", "8", "--machine", "dgx-a100", "--pipeline", "2",
                                       "--schedule", "interleaved"])
    assert refused.exit_code == 2 and "interleaving needs" in refused.output  # 2 blocks: no 2 x 2 chunks


def test_the_ends_count_as_blocks_so_the_first_and_last_stages_hold_one_block_fewer(tmp_path):
    """Megatron-Core's account_for_embedding/loss_in_pipeline_split; Llama 3 (Dubey et al. 2024,
    section 3.3.2): with one block a chunk, the first chunk holds only the embedding and the last
    only the output layer and loss."""
    from costmodel.step.pipeline import block_runs, ends_as_blocks
    text = (ZOO_TINY).read_text().replace("repeat: 2", "repeat: 6")
    spec = tmp_path / "gpt6.yaml"
    spec.write_text(text)
    net = load_network(str(spec))
    before, blocks, after = block_runs(net)
    one = ends_as_blocks(net, 8)  # 6 + 2 = 8 chunks of one
    assert one[0] == before and one[-1] == after
    assert [chunk for chunk in one[1:-1]] == blocks
    two = ends_as_blocks(net, 4)  # (6 + 2) / 4 = 2 a chunk: the ends hold one block and the embedding / head
    assert two[0] == before + blocks[0] and two[-1] == blocks[-1] + after
    assert [layer.name for c in two for layer in c] == [layer.name for layer in net.layers]
    assert ends_as_blocks(net, 3) is None  # 8 blocks do not cut into 3
