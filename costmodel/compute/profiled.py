"""The compute model over a profile table: the measured time of the exact kernels a layer pass
calls, interpolated in log space between measured shapes (docs/costmodel.md, "Compute";
docs/profiler.md, "Lookup").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from costmodel.compute.model import ComputeModel, update_bytes
from costmodel.calls.kernel_call import SIZE_FIELDS, KernelCall, shape_fields, split_key
from costmodel.calls.layer_calls import dtype_for_itemsize, kernel_calls, reshard_copy_call
from costmodel.compute.dispatch import dispatch_time, pass_bytes
from costmodel.parallel.shard import LocalLayer
from costmodel.compute.profile_table import ProfileTable, collective_key, is_dispatch_key, wait_key
from costmodel.compute.call_context import is_occurrence_key, occurrence_key


@dataclass(frozen=True)
class Lookup:
    """How a call's time was found: ``exact``, ``interpolated`` (inside the measured range),
    ``extrapolated`` (outside it, constant throughput) or ``fallback`` (no measurement of the
    kernel at this structure; the roofline answered)."""

    seconds: float
    how: str


def _structure(kernel: str, shape: tuple[int, ...]) -> tuple:
    names = shape_fields(kernel, shape)
    return tuple((n, s) for n, s in zip(names, shape) if n not in SIZE_FIELDS and n != "size")


def _sizes(kernel: str, shape: tuple[int, ...]) -> tuple[float, ...]:
    names = shape_fields(kernel, shape)
    return tuple(math.log(max(s, 1)) for n, s in zip(names, shape) if n in SIZE_FIELDS or n == "size")


class _Group:
    """Measurements of one kernel / dtype / algorithm / structure, for interpolation."""

    def __init__(self):
        self.points: list[tuple[float, tuple[float, ...], float]] = []  # (log work, log sizes, log throughput)

    def add(self, work: int, sizes: tuple[float, ...], seconds: float) -> None:
        self.points.append((math.log(work), sizes, math.log(work / seconds)))


def _dist(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    if len(a) != len(b):
        return float("inf")
    return sum((x - y) ** 2 for x, y in zip(a, b))


def _between(lo, hi, log_work, sizes) -> float:
    a = min(lo, key=lambda p: (_dist(p[1], sizes), log_work - p[0]))
    b = min(hi, key=lambda p: (_dist(p[1], sizes), p[0] - log_work))
    if b[0] == a[0]:
        return (a[2] + b[2]) / 2
    t = (log_work - a[0]) / (b[0] - a[0])
    return a[2] + t * (b[2] - a[2])


def _two_point(log_work: float, sizes: tuple[float, ...], lo, hi) -> float:
    box_lo = [p for p in lo if len(p[1]) == len(sizes) and all(a <= b for a, b in zip(p[1], sizes))]
    box_hi = [p for p in hi if len(p[1]) == len(sizes) and all(a >= b for a, b in zip(p[1], sizes))]
    if box_lo and box_hi:
        return _between(box_lo, box_hi, log_work, sizes)
    return _between(lo, hi, log_work, sizes)


#: Ridge on the local regression's slopes (log-log units): keeps collinear sizes (C = F, H = W on
#: a grid) solvable without visibly bending the fit.
_RIDGE = 1e-3


def _local_regression(points, log_work: float, sizes: tuple[float, ...]) -> float:
    """Log throughput from a weighted least-squares fit around the target (local regression).

    Model, centred on the target: ``log time = a + sum_i (b_i u_i + c_i u_i^2) + q v^2`` with
    ``u_i = log size_i - target_i`` and ``v = log work - target log work``; the quadratic terms
    follow a kernel's throughput as it rises and saturates (and falls out of cache) with size,
    which straight lines between far-apart corners miss (they predict held-out convolutions too
    slow; docs/profiler.md, "Lookup", has the comparison). Weights are
    Gaussian in log-size distance, with the bandwidth the squared distance to the (d+1)-th nearest
    point. The answer is clamped to the throughputs of the points that carry the fit.
    """
    X = numpy.array([p[1] for p in points], dtype=float)
    lw = numpy.array([p[0] for p in points], dtype=float)
    log_t = lw - numpy.array([p[2] for p in points], dtype=float)
    target = numpy.array(sizes, dtype=float)
    d2 = ((X - target) ** 2).sum(axis=1)
    h2 = max(float(numpy.sort(d2)[min(len(points), len(sizes) + 1) - 1]), 1e-9)
    w = numpy.sqrt(numpy.exp(-d2 / h2))
    U = X - target
    A = numpy.column_stack([numpy.ones(len(points)), U, U * U, (lw - log_work) ** 2])
    Aw = A * w[:, None]
    reg = _RIDGE * numpy.eye(A.shape[1])
    reg[0, 0] = 0.0
    coef = numpy.linalg.solve(Aw.T @ Aw + reg, Aw.T @ (log_t * w))
    log_thr = log_work - float(coef[0])
    near = [p[2] for p, wi in zip(points, w) if wi * wi > 0.05] or [p[2] for p in points]
    return min(max(log_thr, min(near)), max(near))


def interpolate(points, log_work: float, sizes: tuple[float, ...]) -> tuple[float, bool]:
    """Log throughput at ``log_work`` from measured ``(log work, log sizes, log throughput)``.

    Inside the measured range (a point with less work and one with more exist), with enough points
    of the same dimension for a fit (d + 3 for d sizes), :func:`_local_regression` answers.
    With fewer, log throughput is interpolated linearly in log work between a point with less work
    and one with more: the nearest in shape (log-size distance) among the points whose sizes are all
    <= / all >= the target's (the corners of a box around it), or, without such corners, among all
    points with less / more work; at a measured point that is exact, and between two points it is
    monotone and bounded by theirs. With points on one side only, the nearest one's throughput is
    kept (extrapolation). Returns (log throughput, inside the measured range).
    """
    lo = [p for p in points if p[0] <= log_work]
    hi = [p for p in points if p[0] >= log_work]
    if lo and hi:
        same = [p for p in points if len(p[1]) == len(sizes)]
        if len(same) >= len(sizes) + 3:
            return _local_regression(same, log_work, sizes), True
        return _two_point(log_work, sizes, lo, hi), True
    near = min(points, key=lambda p: (_dist(p[1], sizes), abs(p[0] - log_work)))
    return near[2], False


class ProfiledCompute:
    """A :class:`~costmodel.compute.model.ComputeModel` over a profile table.

    ``pass_s`` sums the times of :func:`~costmodel.calls.layer_calls.kernel_calls` for the pass: an exact
    table hit, else interpolation between measured shapes of the same kernel, dtype, algorithm and
    structure (stride, padding, flags), else the ``fallback`` model. The calls that needed the
    fallback are collected in ``misses`` (so the CLI can say what to profile). That set, and a
    per-call memo, are the only state; answers depend only on the table.
    """

    def __init__(self, table: ProfileTable, fallback: ComputeModel):
        self.table = table
        self.fallback = fallback
        self.name = f"profile {table.label}"
        self.misses: set[KernelCall] = set()
        self.outside: set[KernelCall] = set()
        self._groups: dict[tuple, _Group] = {}
        self._memo: dict[KernelCall, Lookup] = {}
        self._points: tuple[object, list[tuple[int, float]]] = (None, [])  # (executor mapping, its points)
        #: a GPU's table (its datasheet roofline, with efficiencies fitted on published runs, caps an
        #: upward extrapolation; a CPU's datasheet figures are rough defaults, its table's throughput stands)
        self._gpu = table.fingerprint.get("backend") == "cupy"
        for key, e in table.entries.items():
            if is_occurrence_key(key):
                continue
            kernel, shape, dtype, algo = split_key(key)
            g = self._groups.setdefault((kernel, dtype, algo, _structure(kernel, shape)), _Group())
            g.add(e.work, _sizes(kernel, shape), e.median_s)

    def lookup(self, call: KernelCall) -> Lookup:
        """The time of one call, and how it was found (None-free: falls back to the roofline)."""
        if call in self._memo:
            return self._memo[call]
        entry = self.table.entries.get(call.key)
        if entry is not None:
            out = Lookup(entry.median_s, "exact")
        else:
            group = self._groups.get((call.kernel, call.dtype, call.algo, _structure(call.kernel, call.shape)))
            if group is None:
                out = Lookup(self._fallback_call(call), "fallback")
                self.misses.add(call)
            else:
                log_thr, inside = interpolate(group.points, math.log(call.work), _sizes(call.kernel, call.shape))
                seconds = call.work / math.exp(log_thr)
                if self._gpu and not inside and math.log(call.work) > max(point[0] for point in group.points):
                    # more work than any shape measured: a GPU kernel's throughput grows with its work
                    # toward the roofline, so a small kernel's is a floor, not a price (a 262 MFLOP
                    # GEMM's 0.4 TFLOPS carried to a 100 GFLOP one: 60 times the datasheet's time)
                    seconds = min(seconds, self._fallback_call(call))
                out = Lookup(seconds, "interpolated" if inside else "extrapolated")
                if not inside:
                    self.outside.add(call)
        self._memo[call] = out
        return out

    def _fallback_call(self, call: KernelCall) -> float:
        return self.fallback.call_s(call)

    def pass_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float:
        calls = kernel_calls(local, pass_, algorithm)
        if not calls:
            return self.fallback.pass_s(local, pass_, algorithm) if local.layer.op == "embedding" else 0.0
        return sum(self._in_layer(c, local.layer.name) for c in calls)

    def _in_layer(self, call: KernelCall, layer: str) -> float:
        """The call's time where ``layer``'s pass makes it: the entry timed in that place of its step
        (costmodel.compute.call_context.occurrences; installed for one plan) when there is one, else its own."""
        own = self.lookup(call).seconds
        there = self.table.entries.get(occurrence_key(call.key, layer))
        return own if there is None else there.median_s

    def update_s(self, weight_elems: int, itemsize: int, slots: int = 1) -> float:
        """The profiled SGD-with-momentum kernel on one weight tensor of ``weight_elems``; another
        optimiser's step takes it in proportion to the bytes it moves (compute.update_bytes)."""
        if weight_elems <= 0:
            return 0.0
        dtype = dtype_for_itemsize(itemsize)
        if itemsize == 2 and not self._has("sgd.update", "float16") and self._has("sgd.update", "bfloat16"):
            dtype = "bfloat16"  # a bfloat16 table's 2-byte weights
        call = KernelCall("sgd.update", (weight_elems,), dtype, "", 3 * weight_elems, 5 * weight_elems * itemsize)
        return self.lookup(call).seconds * update_bytes(itemsize, slots) / update_bytes(itemsize, 1)

    def _has(self, kernel: str, dtype: str) -> bool:
        return any(k[0] == kernel and k[1] == dtype for k in self._groups)

    def copy_s(self, elems: int, run: int, dtype: str, accumulate: bool) -> float:
        """The profiled block copy (``kernels.reshard``) of ``elems`` in runs of ``run``."""
        if elems <= 0:
            return 0.0
        return self.lookup(reshard_copy_call(elems, run, dtype, accumulate)).seconds

    def call_s(self, call: KernelCall) -> float:
        """The profiled time of one kernel call (exact, interpolated, or the fallback's)."""
        return self.lookup(call).seconds

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int:
        """A convolution's workspace as the table recorded it for each pass's call (a GPU table:
        the cuDNN engine's), the largest of the three; else the fallback's closed form."""
        if local.layer.op == "conv2d" and self.table.records:
            got = [self.table.records.get(c.key, {}).get("workspace_bytes")
                   for p in ("fwd", "bwd_data", "bwd_weights") for c in kernel_calls(local, p, algorithm)]
            if got and all(g is not None for g in got):
                return int(max(got))
        return self.fallback.workspace_bytes(local, algorithm)

    def kept_bytes(self, local: LocalLayer, algorithm: str) -> int:
        return 0  # the timed kernels are dnnplan's own, which keep what the op catalogue counts

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        """The executor's own time around a layer's passes: :meth:`pass_dispatch_s` of each
        pass's bytes (:func:`costmodel.compute.dispatch.pass_bytes`), or the fallback's when the table
        has no ``dispatch/h<k>`` entries (no bytes are counted then)."""
        if not self._dispatch_points():
            return dispatch_time(self.fallback, local, algorithm, consumers)
        return sum(self.pass_dispatch_s(b) for b in pass_bytes(local, algorithm, consumers))

    def _dispatch_points(self) -> list[tuple[int, float]]:
        """(bytes, seconds) of the table's ``dispatch/h<k>`` entries, by bytes; derived once per
        executor mapping (a layer's dispatch asks for them once per pass, for every candidate)."""
        executor = self.table.executor
        if self._points[0] is not executor:
            self._points = (executor, sorted((max(e.bytes, 1), e.median_s) for name, e in executor.items()
                                             if is_dispatch_key(name)))
        return self._points[1]

    def wait_per_work(self, ranks: int) -> float:
        """Seconds a step on ``ranks`` ranks sharing this computer waits for its slowest rank per
        second of its work: the table's ``wait/p<ranks>`` entry (executor.probes.wait), 0 for one
        rank or when the table has none."""
        entry = self.table.executor.get(wait_key(ranks)) if ranks > 1 else None
        return entry.median_s if entry is not None else 0.0

    def pass_dispatch_s(self, nbytes: float) -> float:
        """The executor's own time after one layer pass whose kernels move ``nbytes``, from the
        table's ``dispatch/h<k>`` entries (executor.probes.dispatch: the probe's passes binned by their
        bytes, each entry's ``bytes`` its passes' typical bytes): linear in log(bytes) between
        neighbouring entries, the nearer end's outside them; 0 without entries."""
        return log_interpolated(self._dispatch_points(), nbytes)

    def collective_code_s(self, ranks: int, kind: str, nbytes: float) -> float:
        """The executor's own code around one collective of ``kind`` on ``ranks`` ranks after a
        pass whose kernels moved ``nbytes`` (executor.probes.collective_code): the table's
        ``collective/p<ranks>/<kind>/b<bytes>`` entries, linear in log(bytes) between them (a
        pass of no bytes counts as one); 0 for one rank or without entries."""
        if ranks < 2:
            return 0.0
        head = collective_key(ranks, kind, 0)[:-1]  # ".../b"
        points = sorted((max(e.bytes, 1), e.median_s) for name, e in self.table.executor.items()
                        if name.startswith(head))
        return log_interpolated(points, nbytes)


def log_interpolated(points: list[tuple[int, float]], nbytes: float) -> float:
    """The seconds at ``nbytes`` of (bytes, seconds) ``points`` sorted by bytes: linear in
    log(bytes) between neighbours, the nearer end's outside them; 0 without points."""
    if not points:
        return 0.0
    x = math.log(max(nbytes, 1))
    if x <= math.log(points[0][0]):
        return points[0][1]
    for (b0, t0), (b1, t1) in zip(points, points[1:]):
        if x <= math.log(b1):
            return t0 + (t1 - t0) * (x - math.log(b0)) / (math.log(b1) - math.log(b0))
    return points[-1][1]
