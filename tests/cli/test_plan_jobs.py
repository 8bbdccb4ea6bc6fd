"""`dnnplan plan --jobs N`: worker processes compute the pipeline pairs' bounds, and Ctrl-C leaves none
of them running (lifecycle.process_pool)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.proc_table import describe, gone_within, tree
from tests.support.processes import dnnplan_env

#: a transformer whose every ZeRO stage runs the pipeline search (no plan of the whole batch fits)
PIPELINED = ["qwen3-30b-a3b", "-p", "64", "--machine", "dgx-h100", "--precision", "bf16"]


@pytest.mark.slow
def test_ctrl_c_while_workers_bound_the_pairs_leaves_no_process_running(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", "plan", *PIPELINED, "--jobs", "2", "--time-limit", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dnnplan_env(tmp_path))
    try:
        deadline = time.monotonic() + 60
        while len(seen := tree(proc.pid)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)  # the command and its two workers
        assert len(seen) >= 3, f"no workers started: {describe(list(seen))}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    still = gone_within(seen, 3.0)
    assert not still, describe(still)
