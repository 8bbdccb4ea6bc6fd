"""Fitting alpha, beta, gamma to measured collective times (pure least squares).

Every collective cost in :mod:`costmodel.collectives` is linear in (alpha, beta, gamma) once the
algorithm is fixed, so a measurement ``t`` of collective ``c`` on ``n`` bytes over ``p`` ranks is
one row ``[A, B, G] . [alpha, beta, gamma] = t`` with ``A = cost(n, p, (1, 0, 0))`` etc., the
algorithm being the one MPICH picks (``choose_algorithm(..., rule="mpi")``). The fit minimises the
*relative* error (rows divided by ``t``, so bytes-sized and MiB-sized messages count alike) with
non-negative parameters (the best of the least-squares solutions on every subset of the three
columns whose solution is non-negative).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from costmodel.collectives import COST_FUNCTIONS, choose_algorithm, sendrecv_s
from costmodel.machine import LinkLevel

COLLECTIVES = ("sendrecv", "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
_UNIT = (LinkLevel("a", 1.0, 0.0, 0.0), LinkLevel("b", 0.0, 1.0, 0.0), LinkLevel("g", 0.0, 0.0, 1.0))


@dataclass(frozen=True)
class Fit:
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    #: (collective, nbytes, measured_s, fitted_s) per measurement
    points: tuple[tuple[str, int, float, float], ...]

    @property
    def link(self) -> LinkLevel:
        return LinkLevel("profiled", self.alpha_s, self.beta_s_per_byte, self.gamma_s_per_byte)

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
    return Fit(alpha, beta, gamma, pts)


def fit_all(measurements: list[tuple[str, int, float]], p: int) -> tuple[dict[str, Fit], Fit]:
    """One fit per collective, and the joint fit (one link for every collective) the cost model uses."""
    per = {c: fit([m for m in measurements if m[0] == c], p) for c in COLLECTIVES
           if any(m[0] == c for m in measurements)}
    return per, fit(measurements, p)


def fit_json(f: Fit) -> dict:
    return {"alpha_s": f.alpha_s, "beta_s_per_byte": f.beta_s_per_byte, "gamma_s_per_byte": f.gamma_s_per_byte,
            "fit_error": f.median_error, "max_error": f.max_error,
            "points": [[c, n, m, fv] for c, n, m, fv in f.points]}
