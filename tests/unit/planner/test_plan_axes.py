"""The planner's axes (issue 52, "the planner searches these axes"): context and expert parallelism
chosen where they win, by hand-checked small cases; interleaved 1F1B searched, written to a plan file
and priced again the same by `dnnplan predict`; the layout named by axis (planner.plan.layout_by_axis)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from costmodel.parallel.strategy import Strategy
from dnnplan.cli import app
from executor.session.execute import cannot_run
from planner.plan.layout_by_axis import axes, axes_line
from planner.pipeline.triples import saving
from planner.plan.plan_file import read_plan

from tests.support.paths import ZOO

LONG_ATTENTION = """name: long-attention
description: one causal attention layer of one head over 8192 tokens
inputs:
  tokens: {shape: [8192], dtype: int64}
layers:
  - {name: embed, op: embedding, inputs: tokens, vocab: 256, dim: 64}
  - {name: attn, op: attention, heads: 1, causal: true}
  - {name: head, op: linear, features: 256}
  - {name: loss, op: softmax_cross_entropy}
"""
WIDE_MOE = """name: wide-moe
description: one mixture of 4 wide SwiGLU experts, top 1, over 64 tokens
inputs:
  tokens: {shape: [64], dtype: int64}
layers:
  - {name: embed, op: embedding, inputs: tokens, vocab: 256, dim: 64}
  - {name: moe, op: moe, experts: 4, top_k: 1, hidden: 16384, gated: true}
  - {name: head, op: linear, features: 256}
  - {name: loss, op: softmax_cross_entropy}
"""


def _plan(tmp_path, spec: str, *args: str) -> dict:
    path = tmp_path / "net.yaml"
    path.write_text(spec)
    got = CliRunner().invoke(app, ["plan", str(path), "--machine", "dgx-a100", "--precision", "bf16", *args, "--json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def _layer(out: dict, name: str) -> dict:
    return next(lp for lp in out["layers"] if lp["name"] == name)


def test_context_parallelism_splits_a_long_sequence_no_other_axis_can(tmp_path):
    """One sequence of 8192 tokens, one head, on 4 devices: the batch (1) and the heads (1) cannot
    split, so the attention's only parallelism is its sequence: context 4. By hand: each rank then
    runs a quarter of the causal score tiles (Megatron-Core's load-balanced chunks), so its forward
    is near a quarter of the unsplit one, which every rank of the data-parallel baseline (here
    replication) runs whole."""
    split = _plan(tmp_path, LONG_ATTENTION, "-p", "4", "-b", "1")
    whole = _plan(tmp_path, LONG_ATTENTION, "-p", "1", "-b", "1")
    assert _layer(split, "attn")["strategy"] == {"H": 4}
    assert split["axes"]["context"] == {"4": 4} and split["axes"]["data"] == {} and split["axes"]["tensor"] == {}
    ratio = _layer(split, "attn")["fwd_s"] / _layer(whole, "attn")["fwd_s"]
    assert 0.24 < ratio < 0.3, ratio
    data = next(b for b in split["baselines"] if b["name"] == "data parallel")
    assert split["step_s"] < data["step_s"] / 2


def test_expert_parallelism_splits_the_experts_weights(tmp_path):
    """Four SwiGLU experts of 64 x 16384 (25.2 MB of bf16 weights) on 4 devices under Adam: the
    planner splits the experts over an expert group (E), with or without a tensor split of each, and
    its devices hold 1 / (E F) of the experts' weights; the data-parallel baseline, every expert on
    every device, is slower and larger."""
    out = _plan(tmp_path, WIDE_MOE, "-p", "4", "-b", "4", "--optimizer", "adam", "--layers")
    moe = _layer(out, "moe")["strategy"]
    assert moe.get("E", 1) > 1 and out["axes"]["expert"] == {str(moe["E"]): 1}
    weights = 4 * 3 * 64 * 16384 * 2  # experts x (gate, up, down) x dim x hidden x bf16 bytes
    share = weights / (moe["E"] * moe.get("F", 1))
    assert out["memory_parts_bytes"]["weights"] == pytest.approx(share, rel=0.05)  # the rest: router, embed, head
    data = next(b for b in out["baselines"] if b["name"] == "data parallel")
    assert out["step_s"] < data["step_s"] and out["memory_peak_bytes"] < data["memory_peak_bytes"]


def _gpt8(tmp_path) -> str:
    path = tmp_path / "gpt-8blocks.yaml"
    path.write_text((ZOO / "gpt-tiny.yaml").read_text().replace("repeat: 2", "repeat: 8"))
    return str(path)


def test_an_interleaved_plan_round_trips_through_its_file(tmp_path):
    """`--schedule interleaved` searches interleaved 1F1B only; its plan file holds the chunks and
    each chunk's first layer, `dnnplan predict` prices the file at the plan's step, and the executor
    refuses it in one line (it runs 1F1B and GPipe)."""
    net, out = _gpt8(tmp_path), tmp_path / "plan.yaml"
    args = ["plan", net, "-p", "8", "-b", "16", "--machine", "dgx-a100", "--precision", "fp16", "--memory", "0.004",
            "--pipeline", "auto", "--schedule", "interleaved", "--optimizer", "momentum", "--out", str(out), "--json"]
    got = CliRunner().invoke(app, args)
    assert got.exit_code == 0, got.output
    planned = json.loads(got.stdout)
    spec = yaml.safe_load(out.read_text())["pipeline"]
    assert spec["schedule"] == "interleaved" and spec["chunks"] >= 2
    assert len(spec["first_layers"]) == spec["stages"] * spec["chunks"]
    assert planned["axes"]["zero"] == 0 and planned["chunks"] == spec["chunks"]
    again = CliRunner().invoke(app, ["predict", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_s"] == pytest.approx(planned["step_s"], rel=1e-9)
    plan, _ = read_plan(str(out))
    assert "interleaves" in str(cannot_run(plan, str(out)))


def test_the_default_search_interleaves_the_best_pair_and_says_so(tmp_path):
    """Without --schedule the best 1F1B pair is also weighed interleaved: 8 blocks on 4 devices,
    whose best pair (4 stages, 4 micro-batches) can hold 2 chunks a device; that variant is weighed
    (searched, or ruled out by its lower bound), another pair's only where its interleaving could
    win (its 1F1B lower bound times planner.pipeline.triples.saving below the step), and nothing
    tried beats the plan."""
    args = ["plan", _gpt8(tmp_path), "-p", "4", "-b", "16", "--machine", "dgx-a100", "--precision", "fp16",
            "--memory", "0.004", "--pipeline", "auto", "--json"]
    got = CliRunner().invoke(app, args)
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert (out["pipeline"]["stages"], out["pipeline"]["micro_batches"]) == (4, 4)
    tried = [c for c in out["tried"] if c["chunks"] > 1]
    assert (tried[0]["stages"], tried[0]["micro_batches"], tried[0]["chunks"]) == (4, 4, 2)
    assert tried[0]["skipped"] in ("", "bound") and tried[0]["bound_s"] > 0
    assert tried[0]["step_s"] is not None or tried[0]["bound_s"] >= out["step_s"]
    lower = {(c["stages"], c["micro_batches"]): c["lower_s"] for c in out["tried"] if c["chunks"] == 1}
    for c in tried[1:]:
        assert lower[(c["stages"], c["micro_batches"])] * saving(c["stages"], c["micro_batches"], c["chunks"]) \
            < out["step_s"]
    assert all(c["step_s"] is None or c["step_s"] >= out["step_s"] * (1 - 1e-12) for c in out["tried"])


def test_an_interleaving_the_blocks_cannot_take_is_refused_in_one_line():
    """gpt-tiny's 2 blocks cannot be cut into 2 stages x 2 chunks: one line naming what would."""
    got = CliRunner().invoke(app, ["plan", "gpt-tiny", "-p", "2", "-b", "8", "--machine", "dgx-a100", "--pipeline",
                                   "2", "--schedule", "interleaved"])
    assert got.exit_code == 2 and "interleaving needs" in got.output and "Traceback" not in got.output


def test_the_axes_line_names_every_axis_by_hand():
    p = 16
    layers = [("attention", Strategy.of(p, N=2, H=4, F=2), "flash"),
              ("linear", Strategy.of(p, N=2, H=4, C=2, SP=1), ""),
              ("moe", Strategy.of(p, N=2, E=8), "flash+recompute"),
              ("attention", Strategy.of(p, N=2, H=4, F=2), "materialized")]
    found = axes(layers, sequence=True)
    assert found["data"] == {2: 4} and found["expert"] == {8: 1} and found["context"] == {4: 3}
    assert found["tensor"] == {2: 3}
    assert "spatial" not in found and found["sequence_parallel_layers"] == 1 and found["recomputed_layers"] == 1
    assert found["attention"] == {"flash": 1, "materialized": 1}
    line = axes_line(found, "pipeline 4 (1F1B), 8 micro-batches of 2", 1)
    assert line.startswith("axes (degree, layers): data 2 (4), expert 8 (1), context 4 (3), tensor 2 (3), "
                           "sequence-parallel 1;")
    two = axes_line({**found, "tensor": {4: 242, 16: 1}, "sequence_parallel_layers": 161})
    assert "tensor 4 (242), tensor 16 (1), sequence-parallel 161;" in two  # counted once, not per degree
    assert "pipeline 4 (1F1B)" in line and "ZeRO-1" in line and "recomputation on 1 layer;" in line
    image = axes([("conv2d", Strategy.of(8, N=4, H=2), "im2col"), ("conv2d", Strategy.of(8, N=8), "fft")], False)
    assert image["data"] == {4: 1, 8: 1} and image["spatial"] == {2: 1} and "context" not in image
    assert "data 4 (1), data 8 (1), spatial 2 (1)" in axes_line(image)


def test_ranks_that_repeat_a_layers_work_are_named_replicated():
    """A device count the degrees do not fill (1000 ranks, a layer split 200 ways) leaves 5 ranks
    a replica repeating its work: the line says so, as the time those devices add nothing to."""
    layers = [("linear", Strategy.of(1000, N=200), ""), ("linear", Strategy.of(1000, N=1000), "")]
    found = axes(layers, sequence=False)
    assert found["replicated"] == {5: 1} and found["data"] == {200: 1, 1000: 1}
    assert "data 200 (1), data 1000 (1), replicated 5 (1);" in axes_line(found)
