"""``--check``: the distributed step-0 loss and weight gradients against the single-process step.

Each rank sends its gradient shards (with their regions from ``weight_layouts``/``block``) to
rank 0, which assembles full tensors, runs :func:`executor.reference.reference_step` and compares
norm-wise: ``||a - b|| / ||b||`` per tensor (an all-zero reference compares ``||a||`` absolutely).
The result is broadcast so every rank returns the same :class:`CheckResult`.

Tolerance (float32): 1e-4 for the GEMM-based convolutions (direct, im2col). Winograd F(2x2,3x3)
and FFT get 2e-4: docs/kernels.md measures their float32 error at 3.1-3.5e-7 (winograd) and
1.9-3.4e-7 (fft) against 1.6-1.8e-7 for direct, i.e. about twice the GEMM methods, and the
distributed run computes them on shard-sized transforms the reference does not use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.layer_layouts import weight_layouts
from costmodel.layout import block
from executor.init import put
from executor.reference import reference_step
from networks.ir import Network

BASE_TOLERANCE = 1e-4
ALGO_TOLERANCE = {"direct": 1e-4, "im2col": 1e-4, "winograd": 2e-4, "fft": 2e-4}


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    worst_rel_error: float
    worst_tensor: str
    loss_rel_error: float
    tolerance: float


def tolerance_for(algorithms: dict[str, str]) -> float:
    return max([BASE_TOLERANCE] + [ALGO_TOLERANCE.get(a, BASE_TOLERANCE) for a in algorithms.values() if a])


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    nb = float(np.linalg.norm(b64))
    diff = float(np.linalg.norm(a64 - b64))
    return diff / nb if nb > 0 else diff


def gather_full(comm, net: Network, strategies, grads) -> dict | None:
    """Full weight-gradient tensors on rank 0 (None elsewhere). ``grads``: (layer, weight) -> shard."""
    rank = comm.Get_rank()
    mine = []
    for layer in net.layers:
        layouts = weight_layouts(layer, strategies[layer.name])
        for name, _ in layer.weights:
            mine.append(((layer.name, name), block(layouts[name], rank), grads[(layer.name, name)]))
    parts = comm.gather(mine, root=0)
    if rank != 0:
        return None
    full = {}
    for layer in net.layers:
        for name, shape in layer.weights:
            full[(layer.name, name)] = np.zeros(shape, dtype=np.float64)
    for rank_parts in parts:
        for key, region, arr in rank_parts:
            put(full[key], region, arr)  # replicas hold equal values: the last one wins
    return full


def run_check(comm, net: Network, batch: int, strategies, algorithms, seed: int, loss: float,
              grads) -> CheckResult:
    """Collective over ``comm``: compare with the reference on rank 0 and broadcast the verdict."""
    full = gather_full(comm, net, strategies, grads)
    result = None
    if comm.Get_rank() == 0:
        tol = tolerance_for(algorithms)
        ref_loss, ref_grads = reference_step(net, batch, algorithms, seed)
        loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
        worst, worst_name = loss_err, "loss"
        for key, ref in ref_grads.items():
            err = rel_error(full[key], ref)
            if err > worst or not np.isfinite(err):
                worst, worst_name = err, f"{key[0]}.{key[1]}"
        result = CheckResult(bool(np.isfinite(worst) and worst <= tol), float(worst), worst_name,
                             float(loss_err), tol)
    return comm.bcast(result, root=0)
