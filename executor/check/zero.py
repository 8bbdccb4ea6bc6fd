"""``--check`` of a ZeRO plan: after the run, its weights against the same plan run unsharded.

The step-0 comparison with one process (executor.check.gradients) sees the gradients, not what ZeRO changes
after them: the sharded update, the momentum kept in pieces across steps, the allgather of the
updated pieces (and under stage 3 the parameters gathered for every pass). So a ZeRO run with
``--check`` then runs the same steps again from the same initial weights with ZeRO off (the same
plan, stage 0: whole momentum, gradients all-reduced; the same dropout masks, drawn per shard and
step) and compares, per weight, what the steps changed: ``||dw - dw0|| / max(||dw0||, floor)``,
``dw`` the ZeRO run's final weights less the initial ones, ``dw0`` the unsharded run's, the floor as
in executor.check.gradients (1e-2 of the norm the tensor's change would have if the whole change were spread
evenly). The two runs differ only in the order reduce-scatter and allreduce sum in, so the check's
tolerance (1e-4) holds them; a shard left un-updated or gathered from the wrong rank is off by
order 1. Each rank compares its own blocks; the worst over ranks counts.
"""

from __future__ import annotations

import numpy as np

from executor.backend.device import on_host
from executor.check.gradients import FLOOR, CheckResult, rel_error, tolerance_for


def whole_weights(runs, backend) -> dict[tuple[str, str], np.ndarray]:
    """A host copy of every weight this rank holds a block of, whole (collective under ZeRO-3,
    which gathers each layer's pieces). ``runs``: the runtime's layer runs on ``backend``."""
    out = {}
    for run in runs:
        ws = {w: run.ctx.weights[w] for w, _ in run.layer.weights}
        if run.zero is not None and run.zero.stage >= 3:
            ws.update(run.zero.wholes(run.zero.params))
        for w, a in ws.items():
            out[(run.layer.name, w)] = np.array(on_host(backend, a), dtype=np.float64, copy=True)
    return out


def worst_update_error(initial: dict, sharded: dict, unsharded: dict) -> tuple[float, str]:
    """(largest relative error, its tensor) of the sharded run's weight changes against the
    unsharded run's, on this rank's blocks."""
    deltas0 = {k: unsharded[k] - initial[k] for k in initial}
    total = sum(d.size for d in deltas0.values())
    d_all = float(np.sqrt(sum(float(np.sum(d ** 2)) for d in deltas0.values())))
    worst, name = 0.0, ""
    for key, d0 in deltas0.items():
        floor = FLOOR * d_all * np.sqrt(d0.size / max(total, 1))
        err = rel_error(sharded[key] - initial[key], d0, floor)
        if not np.isfinite(err) or err > worst or not name:
            worst, name = err, f"{key[0]}.{key[1]}"
    return worst, name


def against_unsharded(comm, result: CheckResult, stage: int, steps: int, initial: dict, sharded: dict,
                      unsharded: dict, tolerance: float) -> CheckResult:
    """``result`` (the comparison with one process) with the ZeRO comparison folded in: it fails
    when the weight changes differ beyond ``tolerance``, and names that tensor when it is worse off
    than the worst of ``result`` (each against what it is allowed). Collective over ``comm``."""
    mine = worst_update_error(initial, sharded, unsharded)
    every = comm.allgather_object(mine)
    err, name = max(every, key=lambda e: (not np.isfinite(e[0]), e[0]))
    vs = float(err)
    ratio = vs / tolerance if np.isfinite(vs) else float("inf")
    base = result.worst_rel_error / result.tolerance if result.tolerance > 0 else 0.0
    passed = result.passed and ratio <= 1.0
    if ratio <= base:
        return CheckResult(passed, result.worst_rel_error, result.worst_tensor, result.loss_rel_error,
                           result.tolerance, result.vs_one_process, vs)
    return CheckResult(passed, vs, f"{name} (change over {steps} steps, ZeRO-{stage} vs unsharded)",
                       result.loss_rel_error, tolerance, result.vs_one_process, vs)


def check_zero(rt, make_plain, result: CheckResult, schedule, lr: float, momentum: float) -> CheckResult:
    """``--check`` of a ZeRO plan: the same ``schedule`` of steps (index, whether it is the step
    the check compares) again with ZeRO off (``make_plain()``: the runtime of the same plan at stage
    0), from the same weights; the weight changes must agree. Collective; outside every clock."""
    sharded = whole_weights(rt.runs, rt.backend)
    plain = make_plain()
    initial = whole_weights(plain.runs, plain.backend)
    for index, compared in schedule:
        plain.step(index, lr, momentum, keep_grads=compared)
    unsharded = whole_weights(plain.runs, plain.backend)
    plain.comms.free()
    return against_unsharded(rt.comm, result, rt.zero, len(schedule), initial, sharded, unsharded,
                             tolerance_for(rt.algorithms))
