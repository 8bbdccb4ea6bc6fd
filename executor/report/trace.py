"""Chrome trace-event JSON of every rank's timeline (opens in https://ui.perfetto.dev or
chrome://tracing).

One process per rank (``pid`` = rank, named "rank R"), two threads per process: ``compute``
(forward and backward compute, the update) and ``comm`` (forward and backward communication,
reshards, the gradient allreduce). Each span is a complete event (``"ph": "X"``) named after the
layer, with the phase as its category; times are microseconds since the common start (a barrier
before the first step), so ranks line up. A ``step N`` span on a third thread marks each step (on a
GPU the spans are the attribution step's, run eagerly after the timed steps: ``step N (attribution)``).
See https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU (the
trace-event format).
"""

from __future__ import annotations

from executor.report.collect import RankTimes

COMM_PHASES = ("fwd_comm", "bwd_comm", "grad_sync")
THREADS = {"compute": 0, "comm": 1, "steps": 2}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def trace_events(ranks: list[RankTimes], warmup_steps: set[int] | None = None) -> dict:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` (pure)."""
    events: list[dict] = []
    for r in ranks:
        events.append({"ph": "M", "name": "process_name", "pid": r.rank, "tid": 0, "args": {"name": f"rank {r.rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": r.rank, "tid": 0, "args": {"sort_index": r.rank}})
        for tname, tid in THREADS.items():
            events.append({"ph": "M", "name": "thread_name", "pid": r.rank, "tid": tid, "args": {"name": tname}})
        bounds: dict[int, list[float]] = {}
        for layer, phase, start, end, step in r.spans:
            tid = THREADS["comm"] if phase in COMM_PHASES else THREADS["compute"]
            events.append({"ph": "X", "name": layer, "cat": phase, "pid": r.rank, "tid": tid,
                           "ts": _us(start), "dur": _us(max(end - start, 0.0)),
                           "args": {"phase": phase, "step": step}})
            b = bounds.setdefault(step, [start, end])
            b[0], b[1] = min(b[0], start), max(b[1], end)
        for step, (start, end) in sorted(bounds.items()):
            warm = warmup_steps is not None and step in warmup_steps
            apart = step in r.attributed  # a GPU's eager step whose spans stand for the timed steps'
            label = " (warm-up)" if warm else (" (attribution)" if apart else "")
            events.append({"ph": "X", "name": f"step {step}{label}", "cat": "step",
                           "pid": r.rank, "tid": THREADS["steps"], "ts": _us(start), "dur": _us(end - start),
                           "args": {"step": step, "warmup": warm, "attribution": apart}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
