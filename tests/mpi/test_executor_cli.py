"""`dnnplan execute` and `dnnplan validate` end to end under mpiexec: faults, timeout, JSON, trace.

Launcher tests run tests/support/workers/stub_worker.py, the worker with ``run_plan`` from
tests/support/workers/stub_runtime.py, so they do not depend on the runtime's speed; the last tests run the
real runtime on lenet5.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch
from executor.runtime.timers import PHASES

from tests.support.executor_plans import write_uniform_plan
from tests.support.workers.stub_worker import PATCH

pytestmark = pytest.mark.mpi
runner = CliRunner()
STUB_WORKER = "tests.support.workers.stub_worker"


@pytest.fixture
def stub(monkeypatch):
    """Launch the stand-in worker (tests/support/workers/stub_worker.py) instead of executor.launch.worker."""
    monkeypatch.setattr(launch, "WORKER_MODULE", STUB_WORKER)


def workers_alive(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if ("executor.launch.worker" in l or STUB_WORKER in l) and marker in l]


def test_fault_on_one_rank_aborts_the_job_with_its_message(plan2, stub, tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_TEST_FAULT_RANK", "1")
    out = tmp_path / "r.json"
    start = time.monotonic()
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", "--json", str(out), "--timeout", "60"])
    assert time.monotonic() - start < 30
    assert result.exit_code == 1, result.output
    assert "rank 1: internal error: RuntimeError: injected fault on rank 1" in result.output
    assert "BAD TERMINATION" not in result.output and "Traceback" not in result.output
    assert not out.exists()  # no partial result


def test_a_user_error_on_a_rank_is_exit_2(plan2, stub, monkeypatch):
    monkeypatch.setenv("DNNPLAN_TEST_FAULT_RANK", "1")
    monkeypatch.setenv("DNNPLAN_TEST_FAULT_KIND", "user")
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2"])
    assert result.exit_code == 2, result.output
    assert "rank 1: injected fault on rank 1" in result.output


def test_a_run_past_the_timeout_is_killed(plan2, stub, tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_TEST_HANG_S", "120")
    trace = tmp_path / "t.json"
    start = time.monotonic()
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", "--timeout", "2", "--trace", str(trace)])
    assert time.monotonic() - start < 20
    assert result.exit_code == 124, result.output
    assert "exceeded --timeout 2 s" in result.output
    assert not trace.exists()
    time.sleep(0.5)
    assert workers_alive(plan2) == []


def test_json_and_trace(plan2, stub, tmp_path, monkeypatch):
    out, trace = tmp_path / "r.json", tmp_path / "t.json"
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", "--steps", "3", "--warmup", "1", "--check",
                                 "--json", str(out), "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "check" in result.output and "passed" in result.output
    data = json.loads(out.read_text())
    assert set(data) == {"plan", "ranks", "steps", "measured", "predicted", "error", "check", "predicted_peak_bytes",
                         "measured_peak_bytes", "memory_rel", "profile_predicted_step_s"}
    assert data["predicted_peak_bytes"] > 0
    assert data["measured_peak_bytes"] is None and data["memory_rel"] is None  # the stand-in runtime measures none
    assert data["ranks"] == 2 and data["steps"] == 3 and data["plan"] == plan2
    assert set(data["measured"]) == {"step_s", "layers"}
    assert set(data["predicted"]) == {"step_s", "wait_s", "collective_code_s", "layers"}
    assert set(data["error"]) == {"step_rel", "layers"}
    assert set(data["check"]) == {"passed", "worst_rel_error", "worst_tensor"} and data["check"]["passed"]
    names = [l["name"] for l in data["predicted"]["layers"]]
    assert [l["name"] for l in data["measured"]["layers"]] == names == [l["name"] for l in data["error"]["layers"]]
    assert set(data["measured"]["layers"][0]) == {"name", "total_s", *(f"{p}_s" for p in PHASES)}
    assert data["measured"]["step_s"] > 0.005  # the stub sleeps 3 ms per layer
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["cat"] != "step"]
    assert {e["pid"] for e in spans} == {0, 1}
    for pid in (0, 1):  # every rank ran every layer's forward, every step (warm-up included)
        assert len([e for e in spans if e["pid"] == pid and e["cat"] == "fwd_compute"]) == 4 * len(names)
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans)


def test_a_loss_that_turns_nan_is_warned_about(plan2, stub, monkeypatch):
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", "--steps", "3", "--warmup", "1"])
    assert result.exit_code == 0 and "non-finite" not in result.output, result.output
    monkeypatch.setenv("DNNPLAN_TEST_NAN_FROM_STEP", "2")  # the second timed step (one warm-up before)
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", "--steps", "3", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    assert "the loss is nan from timed step 2 on" in " ".join(result.output.split())


def test_worker_module_runs_standalone_under_mpiexec(plan2, tmp_path):
    from profiler.probes.launch import find_mpiexec
    res = tmp_path / "res.pkl"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-m", STUB_WORKER, plan2,
                           "--result", str(res), "--steps", "1", "--warmup", "0"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert res.exists()


@pytest.fixture(scope="module")
def local_plan2(tmp_path_factory):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores: machine `local` holds one device per core")
    return write_uniform_plan(tmp_path_factory.mktemp("local"), "lenet5", 2, 8, "data", machine="local")


@pytest.mark.parametrize("how", ["dnnplan execute inside the job", "the worker alone"])
def test_ranks_bound_to_one_core_each_still_see_the_nodes_cores(local_plan2, tmp_path, how):
    """Open MPI binds each of two ranks to a core, and so does Slurm's task affinity: each rank's
    affinity is then one core, and machine `local` (a device per core) would refuse the 2-device
    plan on every rank. The ranks agree on the node's cores (executor.launch.node) first."""
    from profiler.probes.launch import find_mpiexec
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("DNNPLAN_NODE_CORES", None)
    if how == "the worker alone":
        args = ["-m", STUB_WORKER, local_plan2, "--result", str(tmp_path / "res.pkl"), "--steps", "1",
                "--warmup", "0"]
    else:
        args = ["-c", f"{PATCH}; from dnnplan.cli import main; main()", "execute", local_plan2, "--ranks", "2",
                "--steps", "1", "--warmup", "0", "--json", str(tmp_path / "res.json")]
    probe = subprocess.run([find_mpiexec(), "-bind-to", "core", "-n", "2", sys.executable, "-c",
                            "import os; print(f'<{len(os.sched_getaffinity(0))}>', flush=True)"],
                           capture_output=True, text=True, env=env, timeout=60)
    # the binding took hold (the two ranks' lines may arrive interleaved)
    assert re.findall(r"<(\d+)>", probe.stdout) == ["1", "1"], probe.stdout + probe.stderr
    proc = subprocess.run([find_mpiexec(), "-bind-to", "core", "-n", "2", sys.executable, *args],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "do not fit" not in proc.stdout + proc.stderr
    assert (tmp_path / ("res.pkl" if how == "the worker alone" else "res.json")).exists()


_VALIDATE_IN_JOB = f"""
import sys
from mpi4py import MPI
{PATCH}
import executor.session.validate as ce
real = ce.candidate_plans
def planned(*args, **kwargs):
    print(f"PLANNED on rank {{MPI.COMM_WORLD.Get_rank()}}", flush=True)
    return real(*args, **kwargs)
ce.candidate_plans = planned
from dnnplan.cli import main
sys.argv = ["dnnplan", "validate", "lenet5", "--ranks", "2", "--batch", "8", "--steps", "1", "--warmup", "0",
            "--no-check"]
main()
"""


def test_validate_inside_an_mpi_job_plans_on_rank_0_only(tmp_path):
    """Inside an MPI job (ranks bound to a core each) every rank used to plan for itself, timing
    missing kernels on demand: ranks could choose different plans and run mismatched collectives
    ("See the MPI_ERROR field in MPI_Status", 2 of 3 runs on an empty cache). Rank 0 plans and
    broadcasts the plans; the ranks agree on the node's cores first."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores: machine `local` holds one device per core")
    from profiler.probes.launch import find_mpiexec
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "DNNPLAN_CACHE": str(tmp_path / "cache")}
    env.pop("DNNPLAN_NODE_CORES", None)
    proc = subprocess.run([find_mpiexec(), "-bind-to", "core", "-n", "2", sys.executable, "-c", _VALIDATE_IN_JOB],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [l for l in proc.stdout.splitlines() if l.startswith("PLANNED")] == ["PLANNED on rank 0"]
    assert "planner's plan measured" in proc.stdout
    # the kernel calls listed on rank 0 reach every rank, timed in-run (the summary's in-run errors;
    # the table's "in-run error" header may wrap at 120 columns)
    assert "model error given in-run kernel times: |step error| mean" in " ".join(proc.stdout.split())


_VALIDATE_PLANNING_FAILS = """
import sys
from mpi4py import MPI
import executor.session.validate as ce
from networks.errors import DnnplanError
def planned(*args, **kwargs):
    if MPI.COMM_WORLD.Get_rank() == 0:
        raise DnnplanError("injected planning failure on rank 0")
    raise AssertionError("only rank 0 plans")
ce.candidate_plans = planned
from dnnplan.cli import main
sys.argv = ["dnnplan", "validate", "lenet5", "--ranks", "2", "--batch", "8", "--steps", "1"]
main()
"""


def test_validate_inside_an_mpi_job_ends_every_rank_when_planning_fails():
    """Rank 0's planning failure reaches every rank (each exits 2, none is killed), instead of
    leaving the others waiting for the plans; rank 0 alone says it (every rank has the same mistake)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores: machine `local` holds one device per core")
    from profiler.probes.launch import find_mpiexec
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    start = time.monotonic()
    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", _VALIDATE_PLANNING_FAILS],
                          capture_output=True, text=True, env=env, timeout=120)
    assert time.monotonic() - start < 60
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.count("injected planning failure on rank 0") == 1, proc.stderr
    assert "only rank 0 plans" not in proc.stdout + proc.stderr
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr  # every rank ended by itself, with exit 2


# --- the real runtime -------------------------------------------------------------------------

def test_execute_real_runtime_lenet5_with_check(tmp_path):
    pytest.importorskip("executor.runtime.stage")
    plan = write_uniform_plan(tmp_path, "lenet5", 2, 8, "filter", machine="dgx-a100")
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["execute", plan, "--ranks", "2", "--steps", "2", "--warmup", "1", "--check",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"]
    assert data["measured"]["step_s"] > 0 and data["predicted"]["step_s"] > 0
    assert all(l["total_s"] > 0 for l in data["measured"]["layers"] if l["name"].startswith("conv"))
    assert data["measured_peak_bytes"] > 0 and data["predicted_peak_bytes"] > 0
    assert data["memory_rel"] == pytest.approx(data["measured_peak_bytes"] / data["predicted_peak_bytes"] - 1)
    assert "memory peak per rank measured / predicted" in " ".join(result.output.split())


def test_check_catches_a_broken_decomposition(tmp_path, monkeypatch):
    """Skipping the filter-split input-gradient allreduce must fail --check (exit 3), by far."""
    plan = write_uniform_plan(tmp_path, "lenet5", 2, 8, "filter", machine="dgx-a100")
    out = tmp_path / "r.json"
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.skip_allreduce_worker")
    result = runner.invoke(app, ["execute", plan, "--ranks", "2", "--steps", "1", "--warmup", "0", "--check",
                                 "--json", str(out)])
    assert result.exit_code == 3, result.output
    assert "does not match one process" in result.output
    import re
    err = float(re.search(r"differs by ([0-9.e+-]+)", result.output).group(1))
    assert err > 100 * 1e-4  # orders of magnitude beyond the tolerance, not a rounding effect


def test_validate_runs_the_baselines(tmp_path):
    pytest.importorskip("executor.runtime.stage")
    out = tmp_path / "v.json"
    result = runner.invoke(app, ["validate", "lenet5", "--ranks", "2", "--batch", "8", "--machine", "dgx-a100",
                                 "--steps", "2", "--warmup", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    names = [r["name"] for r in data["plans"]]
    assert "data" in names[0] or "data" in " ".join(names)
    assert all(r["check"]["passed"] for r in data["plans"])
    assert all(r["measured_step_s"] > 0 for r in data["plans"])


def test_fresh_profile_times_the_predictions_kernels_inside_the_run(tmp_path, monkeypatch):
    """--fresh-profile: every rank times each call the prediction looks up once per timed step,
    and the prediction is made from the median of those samples (installed for this prediction)."""
    pytest.importorskip("executor.runtime.stage")
    import statistics

    from executor.session.execute import fresh_calls, measure, prepare
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    plan = write_uniform_plan(tmp_path, "lenet5", 2, 8, "data")
    prep = prepare(plan, 2, None, None)
    from costmodel.step.collective_calls import CommCall
    calls = fresh_calls(prep)
    kernels = [c for c in calls if not isinstance(c, CommCall)]
    collectives = [c for c in calls if isinstance(c, CommCall)]
    assert {c.kernel for c in kernels} >= {"linear.fwd", "relu.bwd", "sgd.update", "softmax_xent.fwd"}
    # data parallel: the weight-gradient allreduces (warm) and the loss's sum (cold), no reshard
    assert {c.state for c in collectives} == {"warm", "cold"}
    assert {c.collective for c in collectives} == {"allreduce"} and all(c.group == 2 for c in collectives)
    job, cmp = measure(prep, steps=2, warmup=0, check=False, trace=False, timeout_s=120, fresh=True)
    assert set(job.kernel_samples) == {c.key for c in calls}
    assert all(len(v) == 2 for v in job.kernel_samples.values())  # the slower rank's, per timed step
    for c in kernels:
        assert prep.compute.lookup(c).seconds == pytest.approx(statistics.median(job.kernel_samples[c.key]))
    # every collective of the prediction is priced with the median of its in-run samples
    from dataclasses import replace

    from costmodel.step.collective_calls import measured_from_samples
    from costmodel.step.prediction import predict_step
    median = {c.measured_key: statistics.median(job.kernel_samples[c.key]) for c in collectives}
    machine = replace(prep.machine, measured=measured_from_samples(calls, job.kernel_samples))
    pred = predict_step(prep.net, prep.plan.batch, prep.plan.strategies(), prep.plan.algorithms(), machine,
                        prep.compute)
    priced = [(c, row.layer.name) for row in pred.layers for c in row.layer.comms]
    assert len(priced) >= 2
    for c, _ in priced:
        assert c.seconds == median[(c.collective, c.nbytes, c.group, "warm" if c.phase == "sync" else "cold")]
    # the step the run was compared with: the same model, plus the ranks' wait (StepPrediction.wait_s)
    # and the executor's code around the collectives (StepPrediction.collective_code_s)
    assert cmp.predicted_collective_code_s > 0
    assert cmp.predicted_step_s - cmp.predicted_wait_s - cmp.predicted_collective_code_s == pytest.approx(pred.step_s)


def test_graphs_asked_for_on_the_host_run_eagerly_and_the_report_says_why(plan2, stub, tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(app, ["execute", plan2, "--ranks", "2", "--steps", "1", "--warmup", "1", "--graphs",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "steps  eager: the host runs no CUDA graphs" in result.output
    assert json.loads(out.read_text())["steps_mode"] == {"mode": "eager", "reason": "the host runs no CUDA graphs"}
