"""Timing how long a P-rank step waits for its slowest rank, for a profile table (``wait/p<P>``).

The executor measures it on its probe network under MPI (:mod:`executor.probes.wait`); this runs
``mpiexec -n P python -m executor.probes.wait`` in a child process, so the profiling process never
starts MPI, with the profile's threads, and keeps the median over the probe's timed steps of the
seconds its ranks waited per second of their work as the table's ``wait/p<P>`` executor entry
(``median_s`` and ``min_s`` hold that fraction, not seconds; ``spread`` its interquartile range
over the median, as for a kernel). The same job measures the executor's code around one
collective (executor.probes.collective_code), kept as the table's ``collective/p<P>/<kind>/b<bytes>``
entries.
"""

from __future__ import annotations

import json
import subprocess
import sys

from costmodel.compute.profile_table import Entry, collective_key, wait_key
from networks.errors import DnnplanError
from profiler.probes.launch import find_mpiexec, probe_env
from profiler.timing.harness import summarize
from lifecycle.jobs import run_job

TIMEOUT_S = 120.0


def time_wait(threads: int, ranks: int, timeout_s: float = TIMEOUT_S) -> tuple[dict[str, Entry], str]:
    """({wait_key(ranks): entry}, "") or ({}, why not): a probe that fails leaves the table
    without the entry (predictions then leave the waiting out); it never stops a plan."""
    if ranks < 2:
        return {}, ""
    try:
        cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, "-m", "executor.probes.wait",
               "--threads", str(threads)]
    except DnnplanError as err:
        return {}, f"the wait probe needs mpiexec ({err})"
    env = probe_env(threads)
    try:
        proc = run_job(cmd, timeout_s, env)
    except subprocess.TimeoutExpired:
        return {}, f"the wait probe took more than {timeout_s:g} s"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return {}, f"the wait probe failed: {last}"
    try:
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        samples = [float(x) for x in got["wait_per_work"]]
        code = {collective_key(ranks, str(kind), int(nbytes)): _one(float(secs), int(nbytes))
                for kind, nbytes, secs in got.get("collective_code", [])}
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return {}, f"the wait probe wrote no samples ({err})"
    if not samples:
        return {}, "the wait probe wrote no samples"
    return {wait_key(ranks): summarize(samples, 0, 0), **code}, ""


def _one(seconds: float, nbytes: int) -> Entry:
    """An entry of one figure (executor.probes.collective_code's median over its samples: no spread kept)."""
    return Entry(min_s=seconds, median_s=seconds, spread=0.0, count=1, flops=0, bytes=nbytes)
