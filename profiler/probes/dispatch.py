"""Timing the executor's own time per layer pass for a profile table (``executor.probes.dispatch``).

The executor measures it on its probe network (:mod:`executor.probes.dispatch`); this runs that in child
processes, ``python -m executor.probes.dispatch``, so the profiling process neither starts MPI nor keeps
the probe's memory. For a table of P ranks sharing the computer, P probes run at once, as its
kernels are timed beside P - 1 companions, and each step's sample of a pass is the slowest
probe's. The passes of every batch are pooled by their bytes into half-decade bins
(:func:`bin_passes`), one ``dispatch/h<bin>`` entry each.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from contextlib import ExitStack

from costmodel.compute.profile_table import Entry, dispatch_key
from profiler.probes.launch import probe_env
from profiler.timing.harness import summarize
from lifecycle.jobs import end_group, job
from networks.errors import DnnplanError

TIMEOUT_S = 120.0


def time_dispatch(threads: int = 1, concurrency: int = 1,
                  timeout_s: float = TIMEOUT_S) -> tuple[dict[str, Entry], str]:
    """({"dispatch/h<bin>": entry}, "") (:func:`bin_passes`), or ({}, why not): a probe that fails
    or times out leaves the table without the entries (the prediction then has no dispatch time);
    it never stops a plan."""
    cmd = [sys.executable, "-m", "executor.probes.dispatch", "--threads", str(threads)]
    # each probe a job of its own session (lifecycle.jobs): a stop signal to this command's group
    # reaches this process, which ends the probes' groups and removes the MPI shared memory and
    # scratch folders their stopped ranks left, and a probe ends itself should this process die
    try:
        with ExitStack() as probes:
            procs = [probes.enter_context(job(cmd, probe_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
                     for _ in range(max(concurrency, 1))]
            return _runs(procs, timeout_s)
    except DnnplanError as err:  # a probe that cannot start
        return {}, f"the executor's probe did not start: {err.bare}"


def _runs(procs: list[subprocess.Popen], timeout_s: float) -> tuple[dict[str, Entry], str]:
    """The probes' samples binned (:func:`time_dispatch`), each probe's group ended when done."""
    runs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                last = (err.strip().splitlines() or ["no message"])[-1]
                return {}, f"the executor's probe failed: {last}"
            runs.append(json.loads(out.strip().splitlines()[-1])["probes"])
    except subprocess.TimeoutExpired:
        return {}, f"the executor's probe took more than {timeout_s:g} s"
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return {}, f"the executor's probe wrote no samples ({err})"
    finally:
        for proc in procs:
            if proc.poll() is None:
                end_group(proc)
    points = []
    for probes in zip(*runs):  # the same batch in every run
        for passes in zip(*(p["passes"] for p in probes)):  # the same pass in every run
            slowest = [max(col) for col in zip(*(q["samples_s"] for q in passes))]
            points.append((int(passes[0]["bytes"]), statistics.median(slowest)))
    return bin_passes(points), ""


def bin_passes(points: list[tuple[int, float]]) -> dict[str, Entry]:
    """One entry per half-decade of bytes, ``dispatch/h<k>`` for the passes moving 10^(k/2) to
    10^((k+1)/2) bytes (a pass moving nothing in bin 0): the median over its passes of the time
    after each (``points``: (bytes, seconds) per pass), its ``bytes`` their geometric mean."""
    bins: dict[int, list[tuple[int, float]]] = {}
    for nbytes, seconds in points:
        bins.setdefault(int(2 * math.log10(max(nbytes, 1))), []).append((max(nbytes, 1), seconds))
    entries = {}
    for k, got in sorted(bins.items()):
        typical = math.exp(statistics.fmean(math.log(b) for b, _ in got))
        entries[dispatch_key(k)] = summarize([t for _, t in got], 0, int(round(typical)))
    return entries
