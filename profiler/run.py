"""Profiling a list of kernel calls into a table: resume, time budget, periodic atomic saves.

The driver behind ``dnnplan profile`` and on-demand profiling; it reports progress through a
callback so the CLI can draw a bar (rendering lives in dnnplan/render/profile.py). Interrupted
(Ctrl-C), it saves every entry measured so far and raises :class:`ProfileInterrupted`: running
the same profile again times only what is missing.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Callable

import numpy
from threadpoolctl import threadpool_limits

from costmodel.calls.kernel_call import KernelCall
from costmodel.compute.profile_table import Entry, ProfileTable, with_entries
from networks.errors import DnnplanError
from profiler.timing.gpu import time_call_gpu
from profiler.timing.harness import TimingPolicy, time_call
from lifecycle.stops import sigint_handled_by
from profiler.tables.store import write_table

Progress = Callable[[int, int, KernelCall], None]  # (done, total, call just measured)


@dataclass
class ProfileRun:
    table: ProfileTable
    measured: dict[str, Entry] = field(default_factory=dict)
    skipped: int = 0          # already in the table (resumed)
    left: list[KernelCall] = field(default_factory=list)  # not measured: time budget spent, or interrupted
    failed: dict[str, str] = field(default_factory=dict)  # key -> error (e.g. out of memory)
    seconds: float = 0.0
    interrupted: bool = False  # stopped by Ctrl-C (what was measured is saved)
    records: dict[str, dict] = field(default_factory=dict)  # key -> what ran (a GPU's conv engines)
    #: the call that stopped the run under ``max_seconds`` before it started, and the least its timing
    #: takes (its FLOPs at the device's peak, times the policy's fewest runs): more than was left
    too_long: tuple[KernelCall, float] | None = None


class ProfileInterrupted(DnnplanError):
    """Ctrl-C stopped a profile; every entry measured before it is saved in ``path`` (None: not
    saved anywhere). ``run`` is the run so far (``interrupted`` set, ``left`` what was not measured)."""

    def __init__(self, run: ProfileRun, path: str | None):
        where = f"saved to {path}" if path else "not saved (no table file)"
        super().__init__(f"interrupted: {len(run.measured)} kernel shapes measured and {where} "
                         f"({len(run.table.entries)} in the table, {len(run.left)} not measured)",
                         hint="run the same profile again to time only those left")
        self.run = run
        self.path = path


def profile_calls(calls: list[KernelCall], table: ProfileTable, xp: ModuleType = numpy, *,
                  threads: int = 1, policy: TimingPolicy = TimingPolicy(), max_seconds: float | None = None,
                  out: str | None = None, save_every_s: float = 10.0, progress: Progress | None = None,
                  peak_flops: float | None = None) -> ProfileRun:
    """Time every call not yet in ``table``; save to ``out`` every ``save_every_s`` and at the end.
    With ``max_seconds``, a call whose timing cannot end within what is left (its FLOPs at
    ``peak_flops``, the device's, for the policy's fewest runs: a kernel is never timed faster) is
    not started: the run stops there (``too_long``), as a kernel cannot be stopped once running.
    Ctrl-C saves what was measured and raises :class:`ProfileInterrupted`."""
    todo = [c for c in calls if c.key not in table.entries]
    run = ProfileRun(table, skipped=len(calls) - len(todo))
    t0 = last_save = time.perf_counter()
    i = 0
    try:
        with threadpool_limits(limits=threads):
            for i, call in enumerate(todo):
                if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                    run.left = todo[i:]
                    break
                least = least_timing_s(call, policy, peak_flops)
                if max_seconds is not None and least > max_seconds - (time.perf_counter() - t0):
                    run.left, run.too_long = todo[i:], (call, least)
                    break
                _measure(run, call, xp, policy)
                if progress is not None:
                    progress(i + 1, len(todo), call)
                if out and time.perf_counter() - last_save > save_every_s:
                    write_table(_with_run(table, run), out)
                    last_save = time.perf_counter()
    except KeyboardInterrupt:
        run.left = [c for c in todo[i:] if c.key not in run.measured and c.key not in run.failed]
        run.interrupted = True
    run.table = _with_run(table, run)
    run.seconds = time.perf_counter() - t0
    if out:
        _save(run.table, out, shielded=run.interrupted)
    if run.interrupted:
        raise ProfileInterrupted(run, out)
    return run


def least_timing_s(call: KernelCall, policy: TimingPolicy, peak_flops: float | None) -> float:
    """The least time timing ``call`` takes: its arithmetic at the device's peak, for the warm-up and
    the fewest timed runs of ``policy`` (0 without a peak, or for a call of no FLOPs)."""
    if not peak_flops or call.flops <= 0:
        return 0.0
    return call.flops / peak_flops * (policy.warmup + policy.min_reps)


def _save(table: ProfileTable, out: str, shielded: bool) -> None:
    """Write the table (atomically, merged with what the file holds); ``shielded``: with a second
    Ctrl-C (or SIGTERM, SIGHUP) ignored meanwhile, so that the entries of an interrupted run are
    saved (lifecycle.stops)."""
    if not shielded:
        write_table(table, out)
        return
    with sigint_handled_by(signal.SIG_IGN):
        write_table(table, out)


def _with_run(table: ProfileTable, run: ProfileRun) -> ProfileTable:
    """``table`` with the run's entries and records."""
    out = with_entries(table, run.measured)
    return replace(out, records={**out.records, **run.records}) if run.records else out


def _measure(run: ProfileRun, call: KernelCall, xp: ModuleType, policy: TimingPolicy) -> None:
    """Time one call into ``run.measured``, or note why it failed in ``run.failed``."""
    try:
        if xp is not numpy:
            run.measured[call.key], record = time_call_gpu(call, xp, policy)
            if record is not None:
                run.records[call.key] = record
            return
        run.measured[call.key] = time_call(call, xp, policy)
    except MemoryError:
        run.failed[call.key] = "out of memory"
    except Exception as err:  # noqa: BLE001 - e.g. cupy OutOfMemoryError; recorded, not fatal
        run.failed[call.key] = f"{type(err).__name__}: {err}"
