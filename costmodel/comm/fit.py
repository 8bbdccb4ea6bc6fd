"""Fitting alpha, beta, gamma to measured collective times (pure least squares).

Every collective cost in :mod:`costmodel.comm.collectives` is linear in (alpha, beta, gamma) once the
algorithm is fixed, so a measurement ``t`` of collective ``c`` on ``n`` bytes over ``p`` ranks is
one row ``[A, B, G] . [alpha, beta, gamma] = t`` with ``A = cost(n, p, (1, 0, 0))`` etc., the
algorithm being the one MPICH picks (``choose_algorithm(..., rule="mpi")``). The fit minimises the
*relative* error (rows divided by ``t``, so bytes-sized and MiB-sized messages count alike) with
non-negative parameters (the best of the least-squares solutions on every subset of the three
columns whose solution is non-negative).

One line does not fit a collective from 8 B to tens of MiB on a real machine: MPICH switches from
an eager to a rendezvous protocol, and large messages fall out of the cache, so the time per byte
changes by several times with the size (docs/profiler.md, "Communication", gives a 2-rank
allreduce's time per byte at three sizes). :func:`fit_regimes` therefore fits each collective piecewise, one
(alpha, beta, gamma) per contiguous size regime (at most :data:`MAX_REGIMES`, each over at least
:data:`MIN_POINTS` sizes), with the breakpoints that minimise the total relative residual: the
size-dependent parameters of the PLogP model (Kielmann, Bal and Verstoep, "Fast measurement of
LogP parameters for message passing platforms", IPDPS workshops 2000).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from costmodel.comm.collectives import COST_FUNCTIONS, choose_algorithm, sendrecv_s
from costmodel.machine.model import LinkLevel

#: At most this many size regimes per collective, each fitted over at least MIN_POINTS sizes.
MAX_REGIMES = 3
MIN_POINTS = 4
COLLECTIVES = ("sendrecv", "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
_UNIT = (LinkLevel("a", 1.0, 0.0, 0.0), LinkLevel("b", 0.0, 1.0, 0.0), LinkLevel("g", 0.0, 0.0, 1.0))


@dataclass(frozen=True)
class Fit:
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    #: (collective, nbytes, measured_s, fitted_s) per measurement
    points: tuple[tuple[str, int, float, float], ...]

    #: (up to bytes, alpha, beta, gamma) per size regime, smallest first (the last bound is inf);
    #: one regime, the whole-range parameters, unless :func:`fit_regimes` found several.
    regimes: tuple[tuple[float, float, float, float], ...] = ()

    @property
    def link(self) -> LinkLevel:
        return LinkLevel("profiled", self.alpha_s, self.beta_s_per_byte, self.gamma_s_per_byte)

    @property
    def regime_links(self) -> tuple[tuple[float, LinkLevel], ...]:
        regimes = self.regimes or ((math.inf, self.alpha_s, self.beta_s_per_byte, self.gamma_s_per_byte),)
        return tuple((upto, LinkLevel("profiled", a, b, g)) for upto, a, b, g in regimes)

    @property
    def errors(self) -> tuple[float, ...]:
        return tuple(abs(f - m) / m for _, _, m, f in self.points)

    @property
    def median_error(self) -> float:
        return float(np.median(self.errors)) if self.points else 0.0

    @property
    def max_error(self) -> float:
        return max(self.errors, default=0.0)


def coefficients(collective: str, nbytes: float, p: int) -> tuple[float, float, float]:
    """(A, B, G): the model time is ``A alpha + B beta + G gamma`` for MPICH's algorithm."""
    if collective == "sendrecv":
        return (1.0, float(nbytes), 0.0) if nbytes else (0.0, 0.0, 0.0)
    algo = choose_algorithm(collective, nbytes, p, _UNIT[0], rule="mpi")
    cost = COST_FUNCTIONS[collective]
    return tuple(cost(nbytes, p, u, algo) for u in _UNIT)  # type: ignore[return-value]


def model_s(collective: str, nbytes: float, p: int, link: LinkLevel) -> float:
    if collective == "sendrecv":
        return sendrecv_s(nbytes, link)
    return COST_FUNCTIONS[collective](nbytes, p, link, "auto", rule="mpi")


def fit(measurements: list[tuple[str, int, float]], p: int) -> Fit:
    """Fit one (alpha, beta, gamma) to ``(collective, nbytes, seconds)`` measurements over p ranks."""
    rows = [(c, n, t, coefficients(c, n, p)) for c, n, t in measurements if n > 0 and t > 0]
    if not rows:
        return Fit(0.0, 0.0, 0.0, ())
    a = np.array([[x / t for x in co] for _, _, t, co in rows])
    ones = np.ones(len(rows))
    best, best_res = np.zeros(3), np.inf
    for k in (3, 2, 1):
        for cols in itertools.combinations(range(3), k):
            sub = a[:, cols]
            if not np.any(sub):
                continue
            sol, *_ = np.linalg.lstsq(sub, ones, rcond=None)
            if np.any(sol < 0):
                continue
            x = np.zeros(3)
            x[list(cols)] = sol
            res = float(np.sum((a @ x - ones) ** 2))
            if res < best_res - 1e-15:
                best, best_res = x, res
    alpha, beta, gamma = (float(v) for v in best)
    link = LinkLevel("profiled", alpha, beta, gamma)
    pts = tuple((c, int(n), float(t), model_s(c, n, p, link)) for c, n, t, _ in rows)
    return Fit(alpha, beta, gamma, pts, ((math.inf, alpha, beta, gamma),))


def _residual(f: Fit) -> float:
    return sum(((fv - m) / m) ** 2 for _, _, m, fv in f.points)


def fit_regimes(measurements: list[tuple[str, int, float]], p: int, max_regimes: int = MAX_REGIMES,
                min_points: int = MIN_POINTS) -> Fit:
    """Fit one collective piecewise in message size (module docstring): contiguous regimes of at
    least ``min_points`` distinct sizes, at most ``max_regimes`` of them, breakpoints chosen by
    dynamic programming to minimise the summed squared relative error. A regime's bound is the
    geometric mean of its largest size and the next regime's smallest. The returned Fit's
    alpha/beta/gamma are the single whole-range fit; its points and errors are the piecewise model's."""
    whole = fit(measurements, p)
    sizes = sorted({n for _, n, t in measurements if n > 0 and t > 0})
    if len(sizes) < 2 * min_points or max_regimes < 2:
        return whole
    by_size = {n: [m for m in measurements if m[1] == n] for n in sizes}
    segment: dict[tuple[int, int], Fit] = {}

    def seg(i: int, j: int) -> Fit:
        if (i, j) not in segment:
            segment[i, j] = fit([m for n in sizes[i:j] for m in by_size[n]], p)
        return segment[i, j]

    # best[k][i]: (residual, cuts) splitting sizes[i:] into at most k regimes
    last = len(sizes)
    best = {1: {i: (_residual(seg(i, last)), (last,)) for i in range(last - min_points + 1)}}
    for k in range(2, max_regimes + 1):
        row = {}
        for i in range(last - min_points + 1):
            choice = best[k - 1][i]
            for j in range(i + min_points, last - min_points + 1):
                res = _residual(seg(i, j)) + best[k - 1][j][0]
                if res < choice[0] - 1e-12:
                    choice = (res, (j,) + best[k - 1][j][1])
            row[i] = choice
        best[k] = row
    cuts = best[max_regimes][0][1]
    regimes, points, start = [], [], 0
    for j in cuts:
        f = seg(start, j)
        upto = math.sqrt(sizes[j - 1] * sizes[j]) if j < last else math.inf
        regimes.append((upto, f.alpha_s, f.beta_s_per_byte, f.gamma_s_per_byte))
        points.extend(f.points)
        start = j
    return Fit(whole.alpha_s, whole.beta_s_per_byte, whole.gamma_s_per_byte, tuple(points), tuple(regimes))


def fit_all(measurements: list[tuple[str, int, float]], p: int) -> tuple[dict[str, Fit], Fit]:
    """One piecewise fit per collective (:func:`fit_regimes`), and the joint fit (one link for
    every collective and size) the cost model falls back on for what was not measured."""
    per = {c: fit_regimes([m for m in measurements if m[0] == c], p) for c in COLLECTIVES
           if any(m[0] == c for m in measurements)}
    return per, fit(measurements, p)


def fit_json(f: Fit) -> dict:
    return {"alpha_s": f.alpha_s, "beta_s_per_byte": f.beta_s_per_byte, "gamma_s_per_byte": f.gamma_s_per_byte,
            "regimes": [[None if math.isinf(u) else u, a, b, g] for u, a, b, g in f.regimes],
            "fit_error": f.median_error, "max_error": f.max_error,
            "points": [[c, n, m, fv] for c, n, m, fv in f.points]}
