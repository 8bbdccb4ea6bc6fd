"""The executor runs ZeRO plans (executor.runtime.zero, executor.check.zero), as costmodel prices them.

- other optimisers are refused in one line, ZeRO plans are not;
- ``dnnplan execute --check`` under mpiexec: lenet5 (data parallel) at ZeRO 1, 2 and 3 on 2 ranks
  with the measured peak falling stage by stage, the tiny GPT data parallel and under Megatron
  tensor parallelism (a weight's data-parallel group smaller than the ranks) on 2 and 4 ranks;
- the collectives a step makes, per layer (phase, name, bytes, group), are those the prediction
  prices (``costmodel.comm.weight_sync.weight_collectives``).

The shard arithmetic on one process: tests/unit/executor/runtime/test_zero_shards.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.step.prediction import predict_step
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from executor.session.execute import prepare
from executor.session.step_choice import uniform_plan
from planner.plan.plan_file import write_plan
from profiler import context

from tests.support.paths import ROOT
from tests.support.processes import mpiexec_or_skip

MACHINE = "dgx-a100"  # a datasheet machine: nothing is profiled on demand


def test_other_optimisers_are_refused_in_one_line_and_zero_plans_are_not(tmp_path):
    zero = _plan(tmp_path, "lenet5", 2, 0, 3)
    assert prepare(zero, 2, 1, None).plan.choices.zero == 3
    plan_obj = _uniform("lenet5", 2, 0)
    plan_obj = dataclasses.replace(plan_obj, choices=plan_obj.choices.but(optimizer="adam"))
    adam = str(tmp_path / "adam.yaml")
    write_plan(plan_obj, adam)
    result = CliRunner().invoke(app, ["execute", adam, "--ranks", "2"])
    assert result.exit_code == 2
    assert "runs SGD with momentum" in result.output and "Traceback" not in result.output


# ---------------------------------------------------------------------------------------------
# real ranks


def _uniform(network: str, ranks: int, tensor: int, batch: int = 8):
    ctx = context.resolve(network, ranks, batch, MACHINE)
    if tensor:
        strategies, fallbacks = megatron_strategies(ctx.network, ranks, batch, tensor, False)
        assert not fallbacks
    else:
        strategies = {layer.name: make_strategy(ranks, {"N": ranks}) for layer in ctx.network.layers}
    return uniform_plan(ctx, network, MACHINE, strategies, "zero")


def _plan(folder, network: str, ranks: int, tensor: int, zero: int) -> str:
    """``network`` data parallel (``tensor`` 0) or Megatron with tensor degree ``tensor``, at ZeRO ``zero``."""
    path = str(folder / f"{network}-{ranks}-t{tensor}-z{zero}.yaml")
    plan = _uniform(network, ranks, tensor)
    write_plan(dataclasses.replace(plan, choices=plan.choices.but(zero=zero)), path)
    return path


def _execute(plan: str, ranks: int, out: Path) -> dict:
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", str(ranks), "--steps", "2", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240", "--force"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"], data["check"]
    assert data["check"]["worst_rel_error"] <= 1e-4
    return data


def _layers(data: dict, which: str) -> dict:
    return {layer["name"]: layer for layer in data[which]["layers"]}


@pytest.mark.mpi
def test_lenet5_zero_1_2_3_pass_the_check_on_2_ranks_and_the_peak_falls(tmp_path):
    peaks = []
    for zero in (0, 1, 2, 3):
        data = _execute(_plan(tmp_path, "lenet5", 2, 0, zero), 2, tmp_path / f"z{zero}.json")
        measured, predicted = _layers(data, "measured"), _layers(data, "predicted")
        peaks.append((data["measured_peak_bytes"], data["predicted_peak_bytes"]))
        assert measured["fc1"][_reduced_in(zero)] > 0 and measured["fc1"]["update_s"] > 0
        if zero == 3:  # the parameters gathered before each pass, in the phases the model prices them
            for phase in ("fwd_comm_s", "bwd_comm_s"):
                assert measured["fc1"][phase] > 0 and predicted["fc1"][phase] > 0
            assert measured["fc1"]["grad_sync_s"] == 0 == predicted["fc1"]["grad_sync_s"]
        else:
            assert predicted["fc1"]["fwd_comm_s"] == 0
    assert all(a[0] > b[0] and a[1] > b[1] for a, b in itertools.pairwise(peaks)), peaks


@pytest.mark.mpi
@pytest.mark.parametrize("network,ranks,tensor,zero", [("gpt-tiny", 2, 0, 3), ("gpt-tiny", 4, 2, 2),
                                                       ("gpt-tiny", 4, 2, 3), ("lenet5", 4, 0, 1)])
def test_dnnplan_execute_zero_matches_one_process(tmp_path, network, ranks, tensor, zero):
    data = _execute(_plan(tmp_path, network, ranks, tensor, zero), ranks, tmp_path / "run.json")
    assert _layers(data, "measured")[("embed" if network == "gpt-tiny" else "fc1")][_reduced_in(zero)] > 0


def _reduced_in(zero: int) -> str:
    """The timer of a step's gradient reduction: after the whole backward up to ZeRO-1, in the
    layer's backward from ZeRO-2 on (the gradients sharded), as the cost model prices it."""
    return "bwd_comm_s" if zero >= 2 else "grad_sync_s"


_RECORD = """
import json, sys
from mpi4py import MPI
from executor.backend.host import HOST
from executor.runtime.stage import _Runtime
from executor.runtime.timers import Timers
from planner.plan.plan_file import read_plan
comm = MPI.COMM_WORLD
out = {}
for path in sys.argv[1:]:
    plan, net = read_plan(path)
    rt = _Runtime(plan, net, HOST.communicator(comm), HOST, 0, Timers(), False)
    out[path] = {}
    for run in rt.runs:
        if run.zero is not None:
            run.zero.set_record(out[path].setdefault(run.layer.name, []))
    rt.step(0, 1e-4, 0.9, False)
    rt.comms.free()
got = comm.gather(out, root=0)
if comm.Get_rank() == 0:
    print(json.dumps(got), flush=True)
"""


def _priced(path: str, network: str, ranks: int, zero: int) -> dict:
    ctx = context.resolve(network, ranks, 8, MACHINE)
    plan = _uniform(network, ranks, 0 if network == "lenet5" else 2)
    pred = predict_step(ctx.network, 8, plan.strategies(), plan.algorithms(), ctx.machine, ctx.compute,
                        Optimizer("momentum", zero))
    out = {}
    for row in pred.layers:
        comms = [[c.phase, c.collective, c.nbytes, c.group] for c in row.layer.comms
                 if c.purpose in ("grad_sync", "param_gather") and c.group > 1]
        if comms:
            out[row.layer.name] = sorted(comms)
    return out


@pytest.mark.mpi
def test_a_steps_zero_collectives_per_layer_are_the_priced_ones(tmp_path):
    cases = [("lenet5", 1), ("lenet5", 2), ("lenet5", 3), ("gpt-tiny", 3)]
    paths = [_plan(tmp_path, net, 4, 0 if net == "lenet5" else 2, zero) for net, zero in cases]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([mpiexec_or_skip(), "-n", "4", sys.executable, "-c", _RECORD, *paths], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert lines, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    per_rank = json.loads(lines[-1])
    for (net, zero), path in zip(cases, paths):
        priced = _priced(path, net, 4, zero)
        assert priced, (net, zero)
        for got in per_rank:  # every rank makes the same collectives as rank 0, which is priced
            assert {name: sorted(c) for name, c in got[path].items() if c} == priced, (net, zero)
