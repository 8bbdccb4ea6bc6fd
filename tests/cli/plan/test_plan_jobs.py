"""`dnnplan plan --jobs N`: worker processes compute the pipeline pairs' bounds, and Ctrl-C leaves none
of them running (lifecycle.process_pool)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from lifecycle.process_pool import ProcessPool
from planner.pipeline.workers.pair_bounds import pair_bound
from tests.support.cli_errors import one_error_line
from tests.support.ctrl_c import default_stop_signals
from tests.support.proc_table import Lines, describe, gone_within, tree
from tests.support.processes import dnnplan_env

#: a transformer whose every ZeRO stage runs the pipeline search (no plan of the whole batch fits)
PIPELINED = ["qwen3-30b-a3b", "-p", "64", "--machine", "dgx-h100", "--precision", "bf16"]
#: a longer search: a plan held after about 3 s, the search going on for about 4 s more (this VM)
LONGER = ["gpt3-175b", "-p", "512", "--machine", "dgx-h100", "--precision", "bf16"]


@pytest.mark.slow
def test_ctrl_c_while_workers_bound_the_pairs_leaves_no_process_running(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", "plan", *PIPELINED, "--jobs", "2", "--time-limit", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dnnplan_env(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while len(seen := tree(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)  # the command and its worker (--jobs 2, at most the cores: it is one of the two)
        assert len(seen) >= 2, f"no workers started: {describe(list(seen))}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    still = gone_within(seen, 3.0)
    assert not still, describe(still)


@pytest.mark.slow
def test_a_burst_of_stop_signals_is_one_stop_with_the_best_plan_and_no_process_left(tmp_path):
    """Six SIGTERMs 2 ms apart (several kills at once; a held Ctrl-C is the same) once the workers
    run: the first stops the search, the others land while it is handled and change nothing: the
    best plan so far, exit 143, no traceback, every worker gone."""
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", "plan", *LONGER, "--jobs", "2", "--time-limit", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dnnplan_env(tmp_path),
                            preexec_fn=default_stop_signals)
    outs, errs = Lines(proc.stdout), Lines(proc.stderr)
    try:
        deadline = time.monotonic() + 60
        while len(seen := tree(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(seen) >= 2, f"no worker started: {describe(list(seen))}"
        # a plan held: the progress line that names it (a fixed wait held none on a loaded machine)
        assert errs.wait_for(lambda line: "best so far" in line, 300, proc), errs.join(1.0)[-2000:]
        for _ in range(6):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.002)
        proc.wait(60)
        out, err = outs.join(), errs.join()
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err
    assert "interrupted by SIGTERM" in err and "step " in out
    still = gone_within(seen, 3.0)
    assert not still, describe(still)


@pytest.mark.parametrize("jobs", ["0", "2000"])
def test_jobs_out_of_range_is_one_line_naming_the_flag(jobs):
    line = one_error_line(CliRunner().invoke(app, ["plan", "lenet5", "-p", "2", "--jobs", jobs]))
    assert "--jobs" in line and "1 to 1,024" in line and jobs in line


def test_one_job_plans_in_process_and_answers_as_two_do():
    """A pipelined plan (gradient accumulation weighed: its pairs bounded) with one job and with two."""
    args = ["plan", "gpt-tiny", "-p", "4", "--precision", "fp16", "--memory", "0.004", "--json", "--time-limit", "600"]
    one, two = (CliRunner().invoke(app, args + ["--jobs", j]) for j in ("1", "2"))
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["pipeline"] is not None and (a["step_s"], a["pipeline"], a["zero"]) == (b["step_s"], b["pipeline"], b["zero"])


def test_two_jobs_bound_each_zero_stages_pairs_side_by_side_and_answer_as_one_does(monkeypatch):
    """The planner weighs the ZeRO stages one after another, each with a pipeline search whose
    pairs' bounds two jobs compute side by side, the later stages' against the step held: the
    same answer, gap and ZeRO choice as one job."""
    args = ["plan", "gpt-tiny", "-p", "8", "--precision", "fp16", "--memory", "0.003", "--json", "--time-limit", "600"]
    one = CliRunner().invoke(app, args + ["--jobs", "1"])
    bounds = []
    unordered = ProcessPool.unordered

    def counted(self, fn, tasks, here=None, keys=None, shared=()):
        if fn is pair_bound:
            bounds.append(len(tasks))
        yield from unordered(self, fn, tasks, here, keys, shared)

    monkeypatch.setattr(ProcessPool, "unordered", counted)
    two = CliRunner().invoke(app, args + ["--jobs", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    assert len(bounds) > 1 and sum(bounds) > 0  # the pairs of more than one stage bounded side by side
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["pipeline"] is not None
    assert (a["step_s"], a["pipeline"], a["zero"], a["solver"]["proven_gap"], a["zero_choice"]) == \
        (b["step_s"], b["pipeline"], b["zero"], b["solver"]["proven_gap"], b["zero_choice"])


def test_more_jobs_than_cores_use_the_cores_and_say_so(monkeypatch):
    """More processes than cores only share them (on the 2-core VM --jobs 16 and more left ZeRO-0 to
    the time limit, a 4.25 s step against 1.99 s; --jobs 600 ran out of file descriptors)."""
    from dnnplan.commands import plan as plan_command
    monkeypatch.setattr(plan_command, "default_jobs", lambda: 2)
    got = CliRunner().invoke(app, ["plan", "lenet5", "-p", "2", "--jobs", "16"])
    assert got.exit_code == 0, got.output
    assert "--jobs 16 is more than the 2 cores this process may run on: 2 used" in " ".join(got.output.split())
