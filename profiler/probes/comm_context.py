"""A plan's collectives timed in their step's context before its run (``executor.probes.comm_context``).

The planning process never starts MPI: this runs ``mpiexec -n P python -m executor.probes.comm_context``
in a child process, with the plan's threads a rank, and returns per collective an entry of its
samples (the median is what the prediction uses, as ``Machine.measured``; executor.session.execute).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Sequence

from costmodel.step.collective_calls import CommCall
from costmodel.compute.profile_table import Entry
from networks.errors import DnnplanError
from profiler.probes.launch import find_mpiexec, probe_env
from profiler.timing.harness import summarize
from lifecycle.jobs import run_job
from lifecycle.scratch import scratch_folder

TIMEOUT_S = 300.0


def time_collectives(calls: Sequence[CommCall], ranks: int, threads: int,
                     timeout_s: float = TIMEOUT_S) -> tuple[dict[str, Entry], str]:
    """({call key: entry}, "") or ({}, why not): a job that fails leaves the collectives priced
    as before (the machine's links); it never stops a plan."""
    if ranks < 2 or not calls:
        return {}, ""
    env = probe_env(threads)
    with scratch_folder("comm-context") as tmp:
        calls_path, result = os.path.join(tmp, "calls.pkl"), os.path.join(tmp, "samples.pkl")
        with open(calls_path, "wb") as fh:
            pickle.dump(list(calls), fh)
        try:
            cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, "-m", "executor.probes.comm_context",
                   calls_path, result, "--threads", str(threads)]
        except DnnplanError as err:
            return {}, f"timing the collectives in step context needs mpiexec ({err})"
        try:
            proc = run_job(cmd, timeout_s, env)
        except subprocess.TimeoutExpired:
            return {}, f"timing the collectives in step context took more than {timeout_s:g} s"
        if proc.returncode != 0 or not os.path.exists(result):
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            return {}, f"timing the collectives in step context failed: {last}"
        with open(result, "rb") as fh:
            samples = pickle.load(fh)
    return {c.key: summarize(samples[c.key], 0, c.nbytes) for c in calls if samples.get(c.key)}, ""
