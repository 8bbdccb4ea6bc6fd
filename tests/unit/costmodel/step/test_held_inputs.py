"""The step's memory timeline holds a resharded input as the executor does (costmodel.memory.held_inputs):
the producer's array when the edge moves nothing, else the received block, and a producer's
output only while something still needs it. Checked by hand on lenet5 and against the executor's
measured peak on 2 ranks."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from costmodel.machine.loading import load_machine
from costmodel.memory.held_inputs import held_deltas
from costmodel.step.prediction import predict_step
from dnnplan.cli import app
from networks.analysis import saved_outputs
from planner.plan.plan_file import write_plan
from profiler.context import compute_model

from tests.support.cases import load, make_plan

F32 = 4


def _deltas(family: str, batch: int = 32) -> dict[str, int]:
    net = load("lenet5")
    plan = make_plan(net, batch, 2, family)
    deltas = held_deltas(net, batch, plan.strategies(), saved_outputs(net), plan.algorithms())
    return {k: v for k, v in deltas.items() if v}


def test_data_parallel_moves_nothing_so_nothing_changes():
    assert _deltas("data") == {}


def test_rows_split_pool_holds_its_producers_array_and_its_output_goes_before_backward():
    # conv1, relu1, pool1, conv2, relu2, pool2 split over rows (H = 2), the rest over samples.
    # Max pooling keeps the positions of its maxima, not its input: the per-layer count's block
    # for pool1 (32 x 6 x 14 x 28, half of relu1's 28 rows) and for pool2 (32 x 16 x 6 x 10: 5 of
    # relu2's 10 rows and a halo row) are not held. conv2 (5x5) receives pool1's rows with halos
    # and keeps that block, so pool1's saved output (32 x 6 x 7 x 14) goes after conv2's forward.
    assert _deltas("spatial_h") == {"pool1": -(32 * 6 * 14 * 28 + 32 * 6 * 7 * 14) * F32,
                                    "pool2": -32 * 16 * 6 * 10 * F32}


def test_a_reader_that_needs_the_whole_input_holds_it_and_its_producer_lets_its_half_go():
    d = _deltas("filter")
    # fc1 (F = 2) needs flatten's whole 400 features for each of the 32 samples; flatten (C = 2)
    # held half of them, gone once fc1 received its copy
    assert d["fc1"] == 32 * 400 * F32 and d["flatten"] == -32 * 200 * F32


def _execute(tmp_path, family: str, batch: int) -> tuple[dict, int]:
    net = load("lenet5")
    plan = dataclasses.replace(make_plan(net, batch, 2, family), machine="dgx-a100")
    path = str(tmp_path / f"{family}.yaml")
    write_plan(plan, path)
    out = tmp_path / f"{family}.json"
    result = CliRunner().invoke(app, ["execute", path, "--ranks", "2", "--steps", "1", "--warmup", "0",
                                      "--json", str(out), "--timeout", "240", "--force"])
    assert result.exit_code == 0, result.output
    machine = load_machine("dgx-a100")
    pred = predict_step(net, batch, plan.strategies(), plan.algorithms(), machine, compute_model(machine, None, 1))
    counted = dataclasses.replace(pred, layers=tuple(dataclasses.replace(x, held_delta=0) for x in pred.layers))
    return json.loads(out.read_text()), counted.memory_peak_bytes


@pytest.mark.mpi
@pytest.mark.parametrize("family", ["spatial_h", "filter", "mixed"])
def test_the_predicted_peak_is_the_executors_within_ten_percent(tmp_path, family):
    data, counted = _execute(tmp_path, family, 64)
    measured, predicted = data["measured_peak_bytes"], data["predicted_peak_bytes"]
    assert abs(measured / predicted - 1) < 0.10, (measured, predicted, counted)
    assert abs(measured - predicted) <= abs(measured - counted), (measured, predicted, counted)


def test_gradients_made_in_backward_are_held_from_their_layers_backward_on():
    """The executor makes each layer's weight gradients in its backward pass: at the peak, the
    step holds those of the layers whose backward has run, never more than every layer's."""
    from costmodel.compute.roofline import Roofline
    from costmodel.machine.loading import load_machine
    from costmodel.step.prediction import predict_step
    from costmodel.parallel.strategy import Strategy
    from networks.loader import load_network
    net = load_network("lenet5")
    m = load_machine("local")
    strategies = {layer.name: Strategy(1) for layer in net.layers}
    up_front = predict_step(net, 8, strategies, {}, m, Roofline(m))
    made = predict_step(net, 8, strategies, {}, m, Roofline(m), grads_in_backward=True)
    total = sum(x.layer.memory.grads for x in up_front.layers)
    assert up_front.memory_parts["grads"] == total > 0
    parts = made.memory_parts
    assert sum(parts.values()) == made.memory_peak_bytes <= up_front.memory_peak_bytes
    held = {sum(x.layer.memory.grads for x in made.layers[i:]) for i in range(len(made.layers))}
    assert parts["grads"] in held  # the gradients of the layers from the peak's layer on
    assert made.memory_peak_bytes >= up_front.memory_peak_bytes - total
