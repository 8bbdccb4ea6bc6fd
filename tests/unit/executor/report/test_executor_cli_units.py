"""The executor's edge without MPI: comparison arithmetic, aggregation, trace, JSON, launcher
decisions and the checks made before anything is launched."""

import json
import statistics
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch
from executor.session import execute as execute_session
from profiler.probes import launch as probe_launch
from executor.report.collect import RankTimes, aggregate, timed_steps
from executor.report.compare import (LayerTimes, Measured, compare, compare_prediction, comparison_json,
                              predicted_layers, rel_error)
from executor.runtime.timers import PHASES, Timers
from executor.report.trace import trace_events

runner = CliRunner()


def lt(name, **phases):
    return LayerTimes(name, {ph: phases.get(ph, 0.0) for ph in PHASES})


def measured(layers, step_s=1.0, ranks=2, steps=3):
    return Measured(ranks, steps, step_s, step_s * 0.9, step_s * 1.1, tuple(layers))


# --- compare (pure) ---------------------------------------------------------------------------

def test_rel_error_is_signed_and_none_without_a_prediction():
    assert rel_error(1.1, 1.0) == pytest.approx(0.1)
    assert rel_error(0.5, 1.0) == pytest.approx(-0.5)
    assert rel_error(1.0, 0.0) is None


def test_compare_synthetic_numbers():
    pred = (lt("a", fwd_compute=1.0, bwd_compute=2.0), lt("b", fwd_compute=0.5, grad_sync=0.5))
    meas = measured([lt("b", fwd_compute=0.6, grad_sync=0.4, update=0.1), lt("a", fwd_compute=1.2, bwd_compute=1.8)],
                    step_s=4.4)
    cmp = compare(pred, 4.0, meas)
    assert [m.name for m in cmp.measured.layers] == ["a", "b"]  # prediction's (network) order
    a, b = cmp.errors
    assert a.phases["fwd_compute"] == pytest.approx(0.2)
    assert a.phases["bwd_compute"] == pytest.approx(-0.1)
    assert a.total == pytest.approx(0.0)
    assert b.phases["grad_sync"] == pytest.approx(-0.2)
    assert b.phases["update"] is None  # measured 0.1, predicted 0: nothing to compare against
    assert b.total == pytest.approx(0.1)
    assert cmp.step_rel == pytest.approx(0.1)
    assert cmp.layer_median_abs_rel == pytest.approx(statistics.median([0.0, 0.1]))


def test_a_layer_the_run_did_not_time_counts_as_zero():
    cmp = compare((lt("a", fwd_compute=1.0),), 1.0, measured([]))
    assert cmp.errors[0].total == pytest.approx(-1.0)
    assert cmp.measured.layers[0].total_s == 0.0


def test_predicted_phases_sum_to_the_predicted_step():
    from costmodel.step.prediction import predict_step
    from costmodel.frameworks.uniform import uniform_strategies
    from profiler import context
    ctx = context.resolve("lenet5", 4, 16, "dgx-a100")
    for spec in ("data", "filter", "spatial"):
        strategies, _ = uniform_strategies(ctx.network, 4, 16, spec)
        pred = predict_step(ctx.network, 16, strategies, {}, ctx.machine, ctx.compute)
        layers = predicted_layers(pred)
        assert [l.name for l in layers] == [l.name for l in ctx.network.layers]
        assert sum(l.total_s for l in layers) == pytest.approx(pred.step_s, rel=1e-12)
        assert compare_prediction(pred, measured(layers, pred.step_s)).step_rel == pytest.approx(0.0)


class Check:
    passed, worst_rel_error, worst_tensor = True, 3e-7, "conv1.weight"


def test_json_has_exactly_the_documented_keys():
    cmp = compare((lt("a", fwd_compute=1.0),), 1.0, measured([lt("a", fwd_compute=1.5)], step_s=1.5))
    for check in (None, Check()):
        data = json.loads(json.dumps(comparison_json("p.yaml", cmp, check)))
        assert set(data) == {"plan", "ranks", "steps", "measured", "predicted", "error", "check",
                             "predicted_peak_bytes", "measured_peak_bytes", "memory_rel"}
        assert data["measured_peak_bytes"] is None and data["memory_rel"] is None  # nothing measured here
        assert set(data["measured"]) == {"step_s", "layers"}
        assert set(data["predicted"]) == {"step_s", "wait_s", "collective_code_s", "layers"}  # wait: StepPrediction.wait_s
        assert set(data["error"]) == {"step_rel", "layers"}
        assert set(data["measured"]["layers"][0]) == {"name", "total_s", *(f"{ph}_s" for ph in PHASES)}
        assert set(data["error"]["layers"][0]) == {"name", "total", *PHASES}
        assert data["error"]["step_rel"] == pytest.approx(0.5)
    assert data["check"] == {"passed": True, "worst_rel_error": 3e-7, "worst_tensor": "conv1.weight"}


# --- collect and trace (pure) -----------------------------------------------------------------

def rank(r, walls, per_step):
    totals = {(s, "x", "fwd_compute"): v for s, v in per_step.items()}
    spans = tuple(("x", "fwd_compute", 0.01 * s, 0.01 * s + v, s) for s, v in per_step.items())
    return RankTimes(r, dict(walls), totals, ("x",), spans)


def test_aggregate_takes_max_over_ranks_then_median_over_timed_steps():
    r0 = rank(0, {0: 9.0, 1: 1.0, 2: 2.0, 3: 3.0}, {0: 9.0, 1: 0.1, 2: 0.5, 3: 0.2})
    r1 = rank(1, {0: 9.0, 1: 1.5, 2: 1.0, 3: 2.5}, {0: 9.0, 1: 0.3, 2: 0.1, 3: 0.1})
    assert timed_steps([r0, r1], 3) == [1, 2, 3]  # the warm-up step 0 is dropped
    m = aggregate([r1, r0], 3)
    assert m.ranks == 2 and m.steps == 3
    assert m.step_s == pytest.approx(2.0)  # max per step: 1.5, 2.0, 3.0
    assert (m.step_min_s, m.step_max_s) == (1.5, 3.0)
    assert m.layers[0].phases["fwd_compute"] == pytest.approx(0.3)  # max per step: 0.3, 0.5, 0.2
    assert m.layers[0].phases["bwd_compute"] == 0.0


def test_aggregate_refuses_when_no_step_was_timed():
    with pytest.raises(ValueError):
        aggregate([rank(0, {}, {})], 3)


def test_trace_is_trace_event_json_with_a_process_per_rank():
    timers = Timers(keep_spans=True)
    timers.begin_step(0)
    with timers.span("conv1", "fwd_compute"):
        pass
    with timers.span("conv1", "grad_sync"):
        pass
    timers.end_step()
    from executor.report.collect import rank_times
    ranks = [rank_times(0, timers, timers.spans[0].start_s), rank_times(1, timers, timers.spans[0].start_s)]
    data = json.loads(json.dumps(trace_events(ranks, warmup_steps={0})))
    events = data["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"rank 0", "rank 1"}
    spans = [e for e in events if e["ph"] == "X" and e["cat"] != "step"]
    assert len(spans) == 4
    for e in spans:
        assert {"name", "cat", "ph", "pid", "tid", "ts", "dur"} <= set(e) and e["ts"] >= 0 and e["dur"] >= 0
    assert {e["tid"] for e in spans if e["cat"] == "grad_sync"} == {1}  # communication on its own track
    assert any(e.get("cat") == "step" and e["args"]["warmup"] for e in events)


# --- launcher decisions -------------------------------------------------------------------------

def test_threads_per_rank_divides_the_cores():
    assert launch.threads_per_rank(2, cores=2) == 1
    assert launch.threads_per_rank(1, cores=8) == 8
    assert launch.threads_per_rank(4, cores=2) == 1  # oversubscribed ranks still get one
    env = launch.thread_env(3, base={})
    assert all(env[v] == "3" for v in launch.THREAD_VARS)


@pytest.mark.parametrize("env,inside", [
    ({}, False), ({"PMI_RANK": "0"}, True), ({"OMPI_COMM_WORLD_SIZE": "4"}, True), ({"MPI_LOCALNRANKS": "2"}, True),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}, True),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, False),  # a batch script, not a job step
])
def test_the_environment_tells_an_mpi_job(env, inside):
    assert launch.env_says_mpi_job(env) is inside


def test_no_mpiexec_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(probe_launch.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(probe_launch.DnnplanError, match="no mpiexec"):
        probe_launch.find_mpiexec()


def test_worker_command_carries_every_option():
    cmd = launch.worker_command("mpiexec", 2, "p.yaml", "r.pkl", steps=3, warmup=1, check=True, trace=True,
                                threads=1, timeout_s=10)
    assert cmd[:3] == ["mpiexec", "-n", "2"] and "executor.launch.worker" in cmd
    assert {"--check", "--trace"} <= set(cmd) and cmd[cmd.index("--steps") + 1] == "3"


# --- refused before launch --------------------------------------------------------------------

def test_wrong_rank_count_is_refused_before_launch(plan2, monkeypatch):
    def no_launch(*a, **k):
        raise AssertionError("launched")
    monkeypatch.setattr(launch, "launch", no_launch)
    monkeypatch.setattr(execute_session, "find_mpiexec", no_launch)
    result = runner.invoke(app, ["execute", plan2, "--ranks", "3"])
    assert result.exit_code == 2, result.output
    assert "plan is for 2 devices, not --ranks 3" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("args,what", [(["--steps", "0"], "--steps"), (["--timeout", "0"], "--timeout"),
                                       (["--threads", "0"], "--threads")])
def test_bad_options_are_exit_2(plan2, args, what):
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", *args])
    assert result.exit_code == 2 and what in result.output


def test_profile_of_another_thread_count_warns(plan2):
    from executor.session.execute import profile_check
    from planner.plan.plan_file import read_plan

    class Table:
        fingerprint = {"threads": 4, "backend": "numpy"}
        short_id = "abc"
        source = "t.json"

    class Compute:
        table = Table()

    plan, _ = read_plan(plan2)
    warnings = profile_check(plan, Compute(), threads=1)
    assert any("4 thread(s) per rank but this run uses 1" in w for w in warnings)
    assert profile_check(plan, SimpleNamespace(table=None), threads=1) == []


def test_profile_of_another_kernel_revision_warns(plan2):
    from executor.session.execute import profile_check
    from planner.plan.plan_file import read_plan
    from kernels import KERNELS_REVISION

    def table(fp):
        return type("C", (), {"table": type("T", (), {"fingerprint": fp, "short_id": None, "source": "t.json"})()})()

    plan, _ = read_plan(plan2)
    same = {"threads": 1, "backend": "numpy", "kernels": KERNELS_REVISION}
    assert profile_check(plan, table(same), threads=1) == []
    older = profile_check(plan, table({**same, "kernels": KERNELS_REVISION - 1}), threads=1)
    assert [w for w in older if f"revision {KERNELS_REVISION - 1} but this build runs revision "
            f"{KERNELS_REVISION}" in w] == older and len(older) == 1
    unnamed = profile_check(plan, table({"threads": 1, "backend": "numpy"}), threads=1)
    assert len(unnamed) == 1 and "revision 1 or older" in unnamed[0]


@pytest.mark.parametrize("cold", [True, False])
def test_a_comm_profile_without_cold_fits_warns(plan2, monkeypatch, cold):
    from dataclasses import replace

    from costmodel.machine.model import LinkLevel
    from profiler import context
    from executor.session.execute import prepare
    link = LinkLevel(name="fit", alpha_s=1e-6, beta_s_per_byte=1e-10, gamma_s_per_byte=0.0)
    fits = (("allreduce", float("inf"), link),)
    monkeypatch.setattr(context, "profiled_links", lambda machine, compute: replace(
        machine, fitted=fits, fitted_cold=fits if cold else ()))
    err = " ".join(prepare(plan2, 2, 1, None).warnings)
    assert ("no cold fits" in err) is not cold, err


def test_the_measured_step_is_an_equation_only_where_its_terms_sum_to_it():
    """Each layer's measured phase is its slowest rank's median, and the slowest rank differs by
    phase: the terms can sum to more than the median step. The line then gives their sum, never
    `step 8.31 ms = ...` of terms that sum to 9.58 ms."""
    from dnnplan.render.measured.execute import _equation, _terms

    held = _terms([lt("a", fwd_compute=0.002, bwd_compute=0.003, update=0.001)], None, 0.008)
    assert _equation(0.008, held).startswith(" = forward 2 ms + backward 3 ms")  # 2 ms outside the timed layers
    over = _terms([lt("a", fwd_compute=0.00275, bwd_compute=0.0015, grad_sync=0.00122, update=0.000188,
                      wait=0.00392)], None, 0.00831)
    text = _equation(0.00831, over)
    assert " = " not in text and "(9.58 ms together: the slowest rank differs by phase)" in text
    assert "forward 2.75 ms" in text and "outside the timed layers" not in text


def test_a_rank_out_of_memory_is_the_plans_mistake_in_one_line(monkeypatch, capsys):
    """A rank that cannot allocate the plan's arrays (numpy's MemoryError) ends the job as a user's
    mistake (the launcher's exit 2), naming the allocation and the fix, not as "internal error"
    (exit 1)."""
    from executor.launch import worker
    from executor.launch.mpiexec import _RANK_LINE

    ended = []
    monkeypatch.setattr(worker, "abort", lambda comm, code: ended.append(code))
    comm = SimpleNamespace(Get_rank=lambda: 1)
    worker.abort_with(comm, MemoryError("Unable to allocate 16.0 TiB for an array with shape (2147483648, 1, 32, 32)"))
    line = capsys.readouterr().err.strip()
    assert ended == [worker.ABORT_USER] and line.count("\n") == 0
    assert line.startswith("rank 1: out of memory:") and "16.0 TiB" in line and "--batch" in line
    assert not _RANK_LINE.match(line).group(2).startswith("internal error")
