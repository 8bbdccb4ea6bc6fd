"""Profile tables: measured kernel times and fitted collective costs of one device, and the compute
model that reads them (DESIGN.md, "Costs": "interpolated in log space between measured shapes").

A table is a frozen :class:`ProfileTable`; on disk it is JSON (docs/profiler.md)::

    {"format": "dnnplan-profile", "version": 1,
     "fingerprint": {"backend": "numpy", "device": "AMD EPYC", "cores": 2, "threads": 1, ...},
     "entries": {"conv2d.fwd|8,3,32,32,...|float32|im2col":
                     {"min_s": ..., "median_s": ..., "spread": ..., "count": ..., "flops": ..., "bytes": ...}},
     "comm": {"ranks": 2, "collectives": {"allreduce": {"alpha_s": ..., "beta_s_per_byte": ...,
              "gamma_s_per_byte": ..., "fit_error": ..., "points": [[nbytes, measured_s, fitted_s], ...]}},
              "link": {"alpha_s": ..., "beta_s_per_byte": ..., "gamma_s_per_byte": ..., "fit_error": ...}}}

Pure: parsing and serialising work on already-decoded mappings; reading and writing files (atomic,
resumable) is :mod:`profiler.tables`' job, and :func:`load_table` just forwards to it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy

from costmodel.compute import ComputeModel
from costmodel.kernel_calls import (SIZE_FIELDS, KernelCall, dtype_for_itemsize, kernel_calls, reshard_copy_call,
                                    shape_fields, split_key)
from costmodel.layer_cost import dispatch_time, pass_bytes
from costmodel.layer_layouts import LocalLayer
from costmodel.machine import LinkLevel, Machine
from networks.errors import DnnplanError

FORMAT = "dnnplan-profile"
VERSION = 1
#: Fingerprint keys that identify a device: tables differing in any of them are foreign to each other.
IDENTITY_KEYS = ("backend", "device", "cores", "threads", "memory_bytes")
#: The executor's time per layer pass in a table's "executor" mapping: entries named ``dispatch/...``
#: (executor.dispatch).
DISPATCH = "dispatch"
_ENTRY_KEYS = ("min_s", "median_s", "spread", "count", "flops", "bytes")


@dataclass(frozen=True)
class Entry:
    """Timing of one kernel call: fastest and median of ``count`` repetitions, relative spread
    (interquartile range / median), and the call's FLOPs and bytes."""

    min_s: float
    median_s: float
    spread: float
    count: int
    flops: int
    bytes: int

    @property
    def work(self) -> int:
        return self.flops if self.flops > 0 else max(self.bytes, 1)


@dataclass(frozen=True, eq=False)
class ProfileTable:
    fingerprint: Mapping[str, Any]
    entries: Mapping[str, Entry] = field(default_factory=dict)
    comm: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<table>"
    #: Timings of the executor itself rather than of a kernel, by name: ``dispatch``, its Python
    #: between two layer passes (executor.dispatch); an optional "executor" mapping in the file.
    executor: Mapping[str, Entry] = field(default_factory=dict)

    @property
    def short_id(self) -> str:
        """A short, stable hash of the fingerprint's identity (device + threads + backend)."""
        return fingerprint_id(self.fingerprint)

    @property
    def label(self) -> str:
        fp = self.fingerprint
        ranks = f", timed beside {fp['concurrency'] - 1} other rank(s)" if fp.get("concurrency", 1) > 1 else ""
        return f"{fp.get('device', '?')} x{fp.get('threads', '?')}t {fp.get('backend', '?')}{ranks} [{self.short_id}]"


def fingerprint_id(fp: Mapping[str, Any]) -> str:
    ident = json.dumps({k: fp.get(k) for k in IDENTITY_KEYS}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:10]


def same_device(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in IDENTITY_KEYS)


def foreign_reason(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Which identity key differs between two fingerprints (None when they are the same device)."""
    for k in IDENTITY_KEYS:
        if a.get(k) != b.get(k):
            return f"{k} {a.get(k)!r} != {b.get(k)!r}"
    return None


# --- parsing and serialising --------------------------------------------------------------------

def _bad(source: str, why: str) -> DnnplanError:
    return DnnplanError(f"profile table is corrupt: {why}", file=source,
                        hint="delete it and run `dnnplan profile` again")


def table_from_dict(data: Any, source: str) -> ProfileTable:
    """Validate a decoded JSON table strictly; a corrupt or wrong-format table is a DnnplanError."""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise DnnplanError("not a dnnplan profile table (no \"format\": \"dnnplan-profile\")", file=source,
                           hint="pass a file written by `dnnplan profile`")
    if data.get("version") != VERSION:
        raise DnnplanError(f"profile table version {data.get('version')!r} is not {VERSION}", file=source,
                           hint="re-run `dnnplan profile` with this dnnplan")
    fp = data.get("fingerprint")
    if not isinstance(fp, Mapping) or not all(k in fp for k in IDENTITY_KEYS):
        raise _bad(source, f"fingerprint must be a mapping with keys {', '.join(IDENTITY_KEYS)}")
    entries = _entries(data, "entries", "entry", source, split_key)
    comm = data.get("comm", {})
    if not isinstance(comm, Mapping):
        raise _bad(source, "comm must be a mapping")
    _check_comm(comm, source)
    executor = _entries(data, "executor", "executor entry", source)
    return ProfileTable(dict(fp), entries, dict(comm), source, executor)


def _entries(data: Mapping[str, Any], field_: str, what: str, source: str, check_key=None) -> dict[str, Entry]:
    """The mapping ``data[field_]`` of name -> entry, validated (``check_key`` raises on a bad name)."""
    raw = data.get(field_, {})
    if not isinstance(raw, Mapping):
        raise _bad(source, f"{field_} must be a mapping")
    out = {}
    for key, e in raw.items():
        try:
            if check_key is not None:
                check_key(key)
            out[str(key)] = _entry(e)
        except (ValueError, TypeError, KeyError) as err:
            raise _bad(source, f"{what} {key!r}: {err}") from None
    return out


def _entry(e: Any) -> Entry:
    if not isinstance(e, Mapping) or any(k not in e for k in _ENTRY_KEYS):
        raise ValueError("missing fields")
    ent = Entry(float(e["min_s"]), float(e["median_s"]), float(e["spread"]), int(e["count"]),
                int(e["flops"]), int(e["bytes"]))
    if not (ent.median_s > 0 and math.isfinite(ent.median_s) and ent.count >= 1):
        raise ValueError("non-positive time")
    return ent


def _check_comm(comm: Mapping[str, Any], source: str) -> None:
    fits = dict(comm.get("collectives") or {})
    if comm.get("link"):
        fits["link"] = comm["link"]
    cold = comm.get("cold") or {}
    if not isinstance(cold, Mapping) or not isinstance(cold.get("collectives") or {}, Mapping):
        raise _bad(source, "comm.cold must be a mapping with a collectives mapping")
    fits.update({f"cold {name}": f for name, f in (cold.get("collectives") or {}).items()})
    for name, f in fits.items():
        try:
            params = [float(f[k]) for k in ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte")]
            for r in f.get("regimes") or []:
                upto, *rest = r
                params += [float(x) for x in rest] + ([] if upto is None else [float(upto)])
                if len(rest) != 3:
                    raise ValueError("a regime is [up_to_bytes, alpha_s, beta_s_per_byte, gamma_s_per_byte]")
            if not all(math.isfinite(x) and x >= 0 for x in params):
                raise ValueError("negative or non-finite parameter")
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise _bad(source, f"comm fit {name!r}: {err}") from None


def table_to_dict(table: ProfileTable) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "fingerprint": dict(table.fingerprint),
            "entries": {k: e.__dict__.copy() for k, e in sorted(table.entries.items())},
            "comm": dict(table.comm),
            **({"executor": {k: e.__dict__.copy() for k, e in sorted(table.executor.items())}}
               if table.executor else {})}


def merge(base: ProfileTable, new: ProfileTable) -> ProfileTable:
    """``base`` with ``new``'s entries and comm fits added (``new`` wins a key both have).

    Tables of different devices never merge: that is a DnnplanError naming the difference.
    """
    why = foreign_reason(base.fingerprint, new.fingerprint)
    if why:
        raise DnnplanError(f"cannot merge profile tables of different devices ({why})", file=new.source,
                           hint="write this device's profile to its own file")
    entries = dict(base.entries)
    entries.update(new.entries)
    comm = dict(base.comm)
    comm.update(new.comm)
    return replace(base, fingerprint={**base.fingerprint, **new.fingerprint}, entries=entries, comm=comm,
                   executor={**base.executor, **new.executor})


def with_entries(table: ProfileTable, entries: Mapping[str, Entry]) -> ProfileTable:
    return replace(table, entries={**table.entries, **entries})


def with_executor(table: ProfileTable, name: str, entry: Entry) -> ProfileTable:
    return replace(table, executor={**table.executor, name: entry})


def load_table(path: str) -> ProfileTable:
    """Read a table file (delegates to the I/O edge, :func:`profiler.tables.read_table`)."""
    from profiler.tables import read_table  # noqa: PLC0415 - the file edge lives in profiler
    return read_table(path)


# --- interpolation ------------------------------------------------------------------------------

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
    which straight lines between far-apart corners miss (they predicted 19-33% too slow on
    held-out convolutions, docs/profiler.md). Weights are
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
    """A :class:`~costmodel.compute.ComputeModel` over a profile table.

    ``pass_s`` sums the times of :func:`~costmodel.kernel_calls.kernel_calls` for the pass: an exact
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
        for key, e in table.entries.items():
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
                out = Lookup(call.work / math.exp(log_thr), "interpolated" if inside else "extrapolated")
                if not inside:
                    self.outside.add(call)
        self._memo[call] = out
        return out

    def _fallback_call(self, call: KernelCall) -> float:
        fb = self.fallback
        time = getattr(fb, "_time", None)
        if time is not None:
            return time(call.flops, call.bytes)
        return 0.0

    def pass_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float:
        calls = kernel_calls(local, pass_, algorithm)
        if not calls:
            return self.fallback.pass_s(local, pass_, algorithm) if local.layer.op == "embedding" else 0.0
        return sum(self.lookup(c).seconds for c in calls)

    def update_s(self, weight_elems: int, itemsize: int) -> float:
        """The profiled SGD-with-momentum kernel on one weight tensor of ``weight_elems``."""
        if weight_elems <= 0:
            return 0.0
        dtype = dtype_for_itemsize(itemsize)
        call = KernelCall("sgd.update", (weight_elems,), dtype, "", 3 * weight_elems, 5 * weight_elems * itemsize)
        return self.lookup(call).seconds

    def copy_s(self, elems: int, run: int, dtype: str, accumulate: bool) -> float:
        """The profiled block copy (``profiler.kernels.reshard``) of ``elems`` in runs of ``run``."""
        if elems <= 0:
            return 0.0
        return self.lookup(reshard_copy_call(elems, run, dtype, accumulate)).seconds

    def call_s(self, call: KernelCall) -> float:
        """The profiled time of one kernel call (exact, interpolated, or the fallback's)."""
        return self.lookup(call).seconds

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int:
        return self.fallback.workspace_bytes(local, algorithm)

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        """The executor's own time around a layer's passes: :meth:`pass_dispatch_s` of each
        pass's bytes (:func:`costmodel.layer_cost.pass_bytes`), or the fallback's when the table
        has no ``dispatch/...`` entries (no bytes are counted then)."""
        if not self._dispatch_points():
            return dispatch_time(self.fallback, local, algorithm, consumers)
        return sum(self.pass_dispatch_s(b) for b in pass_bytes(local, algorithm, consumers))

    def _dispatch_points(self) -> list[tuple[int, float]]:
        """(bytes, seconds) of the table's ``dispatch/...`` entries, by bytes; derived once per
        executor mapping (a layer's dispatch asks for them once per pass, for every candidate)."""
        executor = self.table.executor
        if self._points[0] is not executor:
            self._points = (executor, sorted((max(e.bytes, 1), e.median_s) for name, e in executor.items()
                                             if name.split("/")[0] == DISPATCH))
        return self._points[1]

    def pass_dispatch_s(self, nbytes: float) -> float:
        """The executor's own time around one layer pass whose kernels move ``nbytes``, from the
        table's ``dispatch/...`` entries (executor.dispatch: its probe at two sizes, each entry's
        ``bytes`` the probe's typical bytes per pass): linear in log(bytes) between them, the
        nearer one's outside; 0 without entries."""
        points = self._dispatch_points()
        if not points:
            return 0.0
        x = math.log(max(nbytes, 1))
        (b0, t0), (b1, t1) = points[0], points[-1]
        if x <= math.log(b0) or b1 == b0:
            return t0
        if x >= math.log(b1):
            return t1
        return t0 + (t1 - t0) * (x - math.log(b0)) / (math.log(b1) - math.log(b0))


# --- communication fits -------------------------------------------------------------------------

def fitted_link(table: ProfileTable) -> LinkLevel | None:
    """The alpha-beta-gamma link fitted jointly over every measured collective, or None."""
    link = table.comm.get("link") if table.comm else None
    if not link:
        return None
    return LinkLevel(name=f"profiled ({table.comm.get('ranks', '?')} ranks)", alpha_s=float(link["alpha_s"]),
                     beta_s_per_byte=float(link["beta_s_per_byte"]),
                     gamma_s_per_byte=float(link["gamma_s_per_byte"]))


def fitted_collective_links(table: ProfileTable, state: str = "warm") -> tuple[tuple[str, float, LinkLevel], ...]:
    """``(collective, up to bytes, link)`` for each measured collective's size regime
    (``dnnplan profile-comm``) in one cache state (``warm``, or ``cold``: none in tables made
    before it was measured); a fit without ``regimes`` (older tables) is one regime."""
    comm = table.comm or {}
    fits = (comm.get("collectives") if state == "warm" else (comm.get(state) or {}).get("collectives")) or {}
    ranks = comm.get("ranks", "?")
    out = []
    for name, f in sorted(fits.items()):
        regimes = f.get("regimes") or [[None, f["alpha_s"], f["beta_s_per_byte"], f["gamma_s_per_byte"]]]
        for upto, a, b, g in regimes:
            bound = math.inf if upto is None else float(upto)
            label = (f"profiled {name} ({ranks} ranks{', cold' if state != 'warm' else ''})"
                     + ("" if upto is None else f" <= {bound:.0f} B"))
            out.append((name, bound, LinkLevel(name=label, alpha_s=float(a), beta_s_per_byte=float(b),
                                               gamma_s_per_byte=float(g))))
    return tuple(out)


def links_from_table(machine: Machine, table: ProfileTable) -> Machine:
    """``machine`` with the table's fitted links (unchanged without a communication profile): the
    joint fit replaces the intra-node link (and a one-node machine's inter link, never used), and
    each measured collective is costed with its own fit of the message's size regime
    (``Machine.fitted``; ``Machine.fitted_cold`` for the collectives that follow a layer's kernels,
    when the table has them); reshards (``Alltoallv``) use the alltoall fit."""
    link = fitted_link(table)
    if link is None:
        return machine
    inter = link if machine.nodes == 1 else machine.inter
    return replace(machine, intra=link, inter=inter, fitted=fitted_collective_links(table),
                   fitted_cold=fitted_collective_links(table, "cold"))
