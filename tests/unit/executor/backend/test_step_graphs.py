"""Timed steps replayed as one captured CUDA graph (executor.runtime.graphs), on the recording
graph double (tests/support/doubles/fake_graphs.py): the capture sequence (the eager warm-up, one capture,
one replay per timed step, the eager attribution step), no host wait inside the captured step, and
each plan that cannot be captured running eagerly with its reason."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

from executor.backend.host import HOST
from executor.runtime import stage
from executor.runtime.graphs import EAGER, GRAPHS, StepMode, step_mode
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers
from networks.errors import DnnplanError

from tests.support.cases import load, make_plan
from tests.support.doubles.fake_graphs import GraphingBackend


def _run(backend, steps=2, warmup=1, graphs=None, check=False):
    net = load("lenet5")
    timers = Timers()
    got = run_plan(make_plan(net, 8, 1, "data"), net, MPI.COMM_SELF, steps=steps, warmup=warmup, seed=3,
                   backend=backend, timers=timers, measure_memory=False, graphs=graphs, check=check)
    return got, timers


def test_the_warmup_runs_eager_one_step_is_captured_and_each_timed_step_replays_it():
    backend = GraphingBackend()
    got, timers = _run(backend, steps=3, check=True)
    assert got.mode == StepMode(GRAPHS) and got.check.passed  # the check's step is the eager warm-up
    assert backend.log == ["begin_capture", "end_capture", "replay", "replay", "replay"]
    assert sorted(timers.step_wall) == [-1, 0, 1, 2] and timers.attributed == [3]  # then the eager attribution step
    eager, _ = _run(GraphingBackend(), steps=4, graphs=False)
    # the double's capture runs its step once (a real capture runs nothing): each replay's loss is
    # the next step's, read from the captured loss array
    assert got.losses == [eager.losses[0]] + eager.losses[2:]


def test_a_host_wait_inside_the_captured_step_is_refused(monkeypatch):
    finish = stage._Runtime.finish

    def waits(self, *a, **k):
        self.backend.synchronize()
        return finish(self, *a, **k)

    monkeypatch.setattr(stage._Runtime, "finish", waits)
    with pytest.raises(DnnplanError, match="CaptureError: synchronize inside a captured step"):
        _run(GraphingBackend(), graphs=True)
    # by default the timed steps then run eagerly, and the mode says why
    got, timers = _run(GraphingBackend(), steps=3)
    assert got.mode.mode == EAGER and "CaptureError: synchronize inside a captured step" in got.mode.reason
    assert "ran eagerly" in got.mode.reason and sorted(timers.step_wall) == [-1, 0, 1, 2]
    eager, _ = _run(GraphingBackend(), steps=3, graphs=False)
    assert got.losses[:2] == eager.losses[:2]  # the warm-up, then the timed steps from the same weights


def test_no_graphs_runs_every_step_eagerly_and_says_so():
    backend = GraphingBackend()
    got, _ = _run(backend, graphs=False)
    assert got.mode == StepMode(EAGER, "--no-graphs") and backend.log == []


def test_ranks_sharing_a_gpu_run_eagerly_with_the_devices_reason():
    backend = GraphingBackend(refusal="ranks share a GPU, so collectives are staged through the host's MPI")
    got, _ = _run(backend, graphs=True)
    assert got.mode.mode == EAGER and "staged through the host" in got.mode.reason and backend.log == []


PLAN = SimpleNamespace(pipeline=None)
NET = SimpleNamespace(layers=[SimpleNamespace(op="conv2d", name="conv1")])


@pytest.mark.parametrize("plan,net,steps,warmup,why", [
    (SimpleNamespace(pipeline=object()), NET, 2, 1, "MPI point-to-point"),
    (PLAN, SimpleNamespace(layers=[SimpleNamespace(op="moe", name="experts")]), 2, 1, "layer experts: mixture"),
    (PLAN, NET, 2, 0, "--warmup 0"),
    (PLAN, NET, 0, 1, "no timed step"),
])
def test_what_cannot_be_captured_runs_eagerly_and_says_why(plan, net, steps, warmup, why):
    for asked in (None, True):
        mode = step_mode(plan, net, GraphingBackend(), steps, warmup, asked)
        assert mode.mode == EAGER and why in mode.reason
    assert step_mode(PLAN, NET, GraphingBackend(), 2, 1, None) == StepMode(GRAPHS)


def test_the_host_runs_eagerly_and_names_it_only_when_graphs_were_asked_for():
    assert step_mode(PLAN, NET, HOST, 2, 1, None) == StepMode(EAGER)
    assert step_mode(PLAN, NET, HOST, 2, 1, True) == StepMode(EAGER, "the host runs no CUDA graphs")


def test_the_worker_is_told_the_mode_asked_for():
    from executor.launch.mpiexec import worker_command  # noqa: PLC0415 - test-local
    from executor.launch.worker import GRAPH_FLAGS, parse_args  # noqa: PLC0415

    def cmd(graphs):
        return worker_command("mpiexec", 2, "p.yaml", "r.pkl", steps=1, warmup=1, check=False, trace=False,
                              threads=1, timeout_s=5.0, graphs=graphs)

    assert "--graphs" not in cmd(None)
    for asked, flag in ((True, "on"), (False, "off")):
        argv = cmd(asked)
        assert argv[argv.index("--graphs") + 1] == flag
        assert GRAPH_FLAGS[parse_args(argv[argv.index("p.yaml"):]).graphs] is asked
    assert GRAPH_FLAGS[parse_args(["p.yaml", "--result", "r"]).graphs] is None


def test_the_report_line_says_which_mode_ran(capsys):
    from dnnplan.render.measured.execute import steps_mode_line  # noqa: PLC0415 - test-local

    steps_mode_line(StepMode(GRAPHS).as_json())
    steps_mode_line(StepMode(EAGER, "layer drop1: dropout draws a new mask seed").as_json())
    steps_mode_line(None)
    out = capsys.readouterr().out
    assert "replayed as one CUDA graph" in out and "eager: layer drop1: dropout" in out


def test_a_capture_the_device_refuses_is_one_line_naming_no_graphs(monkeypatch):
    backend = GraphingBackend()
    def refuse(run):
        raise RuntimeError("cudaErrorStreamCapture")

    monkeypatch.setattr(backend, "capture", refuse)
    with pytest.raises(DnnplanError, match="CUDA graph failed") as err:
        _run(backend, graphs=True)
    assert "--no-graphs" in str(err.value.hint)
    got, _ = _run(backend)  # the default: eager, saying why, and where the refusal was raised
    line = refuse.__code__.co_firstlineno + 1
    assert got.mode == StepMode(EAGER, "capturing a training step as a CUDA graph failed (RuntimeError: "
                                       f"cudaErrorStreamCapture at tests/unit/executor/backend/test_step_graphs.py:{line});"
                                       " the timed steps ran eagerly")
    assert len(got.losses) == 3 and all(np.isfinite(got.losses))
