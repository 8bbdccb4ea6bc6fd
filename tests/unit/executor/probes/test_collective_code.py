"""The executor's code around each collective (executor.probes.collective_code, costmodel.step.barriers): the
barriers a plan makes, counted as the runtime makes them, how a table holds the probe's figures,
how the executor's prediction adds them, and the probe itself (on one rank, and under mpiexec)."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

import pytest
from mpi4py import MPI
from typer.testing import CliRunner

from costmodel.step.barriers import ALLREDUCE, RESHARD, step_barriers
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.compute.profile_table import (Entry, ProfileTable, collective_key, table_from_dict, table_to_dict,
                                             wait_key)
from costmodel.compute.profiled import ProfiledCompute
from costmodel.step.prediction import predict_step, prediction_json
from dnnplan.cli import app
from executor.probes import collective_code
from executor.session import execute as session
from executor.report.compare import Measured, compare_prediction
from executor.runtime.stage import run_strategies
from networks.loader import load_network
from planner.plan.plan_file import write_plan
from profiler.probes import rank_wait

from tests.support.cases import make_plan
from tests.support.paths import ASSETS

FP = {"backend": "numpy", "device": "test cpu", "cores": 2, "threads": 1, "memory_bytes": 1}
runner = CliRunner()


def _entry(seconds: float, nbytes: int) -> Entry:
    return Entry(seconds, seconds, 0.0, 1, 0, nbytes)


def _compute(executor: dict) -> ProfiledCompute:
    return ProfiledCompute(ProfileTable(dict(FP), {}, {}, "<test>", executor), Roofline(load_machine("local")))


def _barriers(net, plan):
    machine = load_machine("local")
    pred = predict_step(net, plan.batch, run_strategies(plan), plan.algorithms(), machine, Roofline(machine))
    return step_barriers(net, plan.batch, run_strategies(plan), pred, plan.algorithms())


def test_a_data_parallel_step_waits_once_per_weighted_layer_and_for_the_loss():
    net = load_network("lenet5")
    got = _barriers(net, make_plan(net, 16, 2, "data"))
    weighted = [layer.name for layer in net.layers if layer.weights]
    assert [b.layer for b in got if b.phase == "sync"] == weighted  # after the whole backward, in layer order
    assert all(b.kind == ALLREDUCE and b.after_bytes == 0 for b in got if b.phase == "sync")
    assert not [b for b in got if b.kind == RESHARD]  # every layer split by sample: no layout changes
    assert _barriers(net, make_plan(net, 16, 1, "data")) == ()  # one rank waits for nobody


def test_a_reshard_waits_in_forward_after_the_pass_before_it_and_in_backward_after_its_own():
    net = load_network("lenet5")
    got = _barriers(net, make_plan(net, 16, 2, "filter"))
    fwd = [b for b in got if b.phase == "fwd" and b.kind == RESHARD]
    bwd = [b for b in got if b.phase == "bwd" and b.kind == RESHARD]
    assert fwd and sorted(b.layer for b in fwd) == sorted(b.layer for b in bwd)
    order = [layer.name for layer in net.layers]
    assert [b.layer for b in fwd] == sorted((b.layer for b in fwd), key=order.index)
    assert [b.layer for b in bwd] == sorted((b.layer for b in bwd), key=order.index, reverse=True)
    assert all(b.after_bytes > 0 for b in bwd)  # each after its own layer's backward kernels


@pytest.mark.mpi
@pytest.mark.parametrize("net_name,family", [("lenet5", "mixed"), ("lenet5", "cf"), ("tinyres", "mixed"),
                                             ("edgenet", "nh")])
def test_the_barriers_counted_are_the_wait_spans_a_run_makes(tmp_path, net_name, family):
    spec = net_name if net_name == "lenet5" else str(ASSETS / f"{net_name}.yaml")
    net = load_network(spec)
    plan = replace(make_plan(net, 8, 2, family), network=spec, machine="dgx-a100")  # a shipped machine: nothing profiled
    path, trace = tmp_path / "plan.yaml", tmp_path / "t.json"
    write_plan(plan, str(path))
    result = runner.invoke(app, ["execute", str(path), "--ranks", "2", "--steps", "2", "--warmup", "0",
                                 "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    events = json.loads(trace.read_text())["traceEvents"]
    for rank in (0, 1):
        waits = Counter(e["name"] for e in events if e["ph"] == "X" and e["cat"] == "wait" and e["pid"] == rank)
        counted = Counter(b.layer for b in _barriers(net, plan))
        assert sum(counted.values()) > 0
        assert {k: v / 2 for k, v in waits.items()} == counted  # two steps, each one wait span per barrier


def test_a_table_gives_the_code_of_its_rank_count_interpolated_in_log_bytes():
    executor = {collective_key(2, "reshard", 0): _entry(10e-6, 0),
                collective_key(2, "reshard", 1 << 20): _entry(20e-6, 1 << 20),
                collective_key(2, "allreduce", 0): _entry(5e-6, 0)}
    compute = _compute(executor)
    assert compute.collective_code_s(2, "reshard", 0) == pytest.approx(10e-6)
    assert compute.collective_code_s(2, "reshard", 1 << 20) == pytest.approx(20e-6)
    assert compute.collective_code_s(2, "reshard", 1 << 10) == pytest.approx(15e-6)  # halfway in log(bytes)
    assert compute.collective_code_s(2, "reshard", 1 << 30) == pytest.approx(20e-6)  # the nearer end's
    assert compute.collective_code_s(2, "allreduce", 1 << 20) == pytest.approx(5e-6)
    assert compute.collective_code_s(4, "reshard", 0) == 0.0  # not measured for 4 ranks
    assert compute.collective_code_s(1, "reshard", 0) == 0.0
    back = table_from_dict(table_to_dict(compute.table), "<rt>")
    assert back.executor[collective_key(2, "reshard", 1 << 20)].bytes == 1 << 20
    assert compute.pass_dispatch_s(1 << 20) == 0.0  # the dispatch interpolation reads only dispatch entries


def _prepared(tmp_path, ranks: int, family: str, executor: dict) -> session.Prepared:
    net = load_network("lenet5")
    plan = make_plan(net, 8 * ranks, ranks, family)
    return session.Prepared(str(tmp_path / "plan.yaml"), plan, net, load_machine("local"), _compute(executor), 1)


def test_the_executor_prediction_adds_the_code_of_every_barrier(tmp_path):
    table = {wait_key(2): _entry(0.0, 0), collective_key(2, "allreduce", 0): _entry(7e-6, 0),
             collective_key(2, "reshard", 0): _entry(11e-6, 0)}
    prep = _prepared(tmp_path, 2, "filter", table)
    pred = session.predict(prep)
    kinds = Counter(b.kind for b in step_barriers(prep.net, prep.plan.batch, run_strategies(prep.plan), pred,
                                                  prep.plan.algorithms()))
    assert kinds[RESHARD] > 0 and kinds[ALLREDUCE] > 0
    assert pred.collective_code_s == pytest.approx(7e-6 * kinds[ALLREDUCE] + 11e-6 * kinds[RESHARD])
    assert pred.step_s == pytest.approx(pred.work_s + pred.wait_s + pred.collective_code_s)
    assert prediction_json(pred)["collective_code_s"] == pytest.approx(pred.collective_code_s)
    # the comparison counts it as the executor's own time outside the layers' spans
    cmp = compare_prediction(pred, Measured(2, 3, pred.step_s, pred.step_s, pred.step_s, (), None))
    assert cmp.predicted_collective_code_s == pytest.approx(pred.collective_code_s)
    assert cmp.predicted_outside_s == pytest.approx(pred.dispatch_s + pred.collective_code_s, rel=1e-6)


def test_no_code_term_on_one_rank_across_nodes_or_without_the_entries(tmp_path):
    table = {collective_key(1, "allreduce", 0): _entry(7e-6, 0), collective_key(2, "allreduce", 0): _entry(7e-6, 0)}
    assert session.predict(_prepared(tmp_path, 1, "data", table)).collective_code_s == 0.0
    two = _prepared(tmp_path, 2, "data", table)
    assert session.predict(two).collective_code_s > 0
    apart = replace(two, machine=replace(two.machine, devices_per_node=1, nodes=2))
    assert session.predict(apart).collective_code_s == 0.0
    assert session.predict(_prepared(tmp_path, 2, "data", {})).collective_code_s == 0.0


def test_the_probe_on_one_rank_gives_every_kind_and_pass():
    got = collective_code.measure(MPI.COMM_SELF, samples=3, warmup=1)
    assert [(k, b) for k, b, _ in got] == [(k, b) for b in collective_code.PASS_BYTES for k in collective_code.KINDS]
    assert all(math.isfinite(s) and 0.0 <= s < 0.01 for _, _, s in got)


@pytest.mark.mpi
def test_the_probe_under_mpiexec_gives_the_tables_code_entries():
    entries, why = rank_wait.time_wait(1, 2)
    assert why == ""
    for kind in collective_code.KINDS:
        for nbytes in collective_code.PASS_BYTES:
            entry = entries[collective_key(2, kind, nbytes)]
            assert entry.bytes == nbytes and 0.0 <= entry.median_s < 0.01
    # a reshard's code (its plan, buffers and counts besides the spans) is more than an allreduce's
    assert entries[collective_key(2, "reshard", 0)].median_s > entries[collective_key(2, "allreduce", 0)].median_s
