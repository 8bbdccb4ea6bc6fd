"""``--check``: the distributed step-0 loss and weight gradients against the single-process step.

Each rank sends its gradient shards (with their regions from ``weight_layouts``/``block``) to
rank 0, which assembles full tensors, runs :func:`executor.check.reference.reference_step` in float64
(the ground truth) and in float32 (one process in the run's own precision), and compares
norm-wise: ``||a - b|| / max(||b||, floor)`` per tensor against the float64 result.

A tensor passes when its error is within the tolerance below, or within four times the error of
the single float32 process where float32 rounding alone already exceeds that tolerance (two
float32 computations that sum in different orders err by a random factor of the same scale; 4x
leaves room for that spread). That spread is taken as the larger of two single float32 processes
that sum in different orders: one with the plan's convolution algorithms, one with another
algorithm everywhere. One sample can be lucky: after ReLU, max-pooling windows hold near-ties that
rounding decides, each a valid subgradient (AlexNet, batch 4: one float32 process with Winograd in
conv3-5 was 1.4e-6 from float64 on conv1.weight, with im2col 4.1e-3): gradients deep
in a network (batch-norm parameters after many layers) are ill-conditioned, and two float32
computations that only sum in a different order differ there by ~1e-3 (measured: ResNet-18 at
64x64, batch 16, ``layer3.1.bn2.gamma``, 6.6e-3 between one float32 process and float64). A wrong
decomposition is off by orders of magnitude more (a run that skips the filter-split allreduce:
6e-1, see tests/mpi/test_executor_cli.py). The floor is ``1e-2`` times the norm the
tensor would have if the whole gradient's norm were spread evenly over all elements
(``||g_all|| * sqrt(size / total)``): a gradient that is zero in exact arithmetic (the bias of a
convolution followed by batch norm) is then judged by its rounding noise against the network's
gradient scale, not against itself.
The result is broadcast so every rank returns the same :class:`CheckResult`.

Tolerance (float32): 1e-4 for the GEMM-based convolutions (direct, im2col). Winograd F(2x2,3x3)
and FFT get 2e-4: docs/kernels.md measures their float32 error at 3.1-3.5e-7 (winograd) and
1.9-3.4e-7 (fft) against 1.6-1.8e-7 for direct, i.e. about twice the GEMM methods, and the
distributed run computes them on shard-sized transforms the reference does not use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.parallel.shard import weight_layouts
from costmodel.parallel.layout import block
from executor.runtime.synthetic import put
from executor.check.reference import on_device_possible, reference_step
from kernels.cuda.precision import CHECK_TOLERANCE
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
    vs_one_process: float = 0.0  # worst error against one float32 process (same precision)
    vs_unsharded: float | None = None  # ZeRO: worst error of the weight changes against ZeRO off (executor.check.zero)


def tolerance_for(algorithms: dict[str, str]) -> float:
    return max([BASE_TOLERANCE] + [ALGO_TOLERANCE.get(a, BASE_TOLERANCE) for a in algorithms.values() if a])


FLOOR = 1e-2
ROUNDING_SPREAD = 4.0  # allowed multiple of one float32 process's own error (see the module doc)


def rel_error(a: np.ndarray, b: np.ndarray, floor: float = 0.0) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denom = max(float(np.linalg.norm(b64)), floor)
    diff = float(np.linalg.norm(a64 - b64))
    return diff / denom if denom > 0 else diff


def local_parts(layers, strategies, rank: int, grads) -> list:
    """This rank's gradient shards with their regions: ((layer, weight), region, array) for every
    weight of ``layers`` (``rank``: its rank among the ranks ``strategies`` span)."""
    mine = []
    for layer in layers:
        layouts = weight_layouts(layer, strategies[layer.name])
        for name, _ in layer.weights:
            mine.append(((layer.name, name), block(layouts[name], rank), grads[(layer.name, name)]))
    return mine


def gather_full(comm, net: Network, mine: list) -> dict | None:
    """Full weight-gradient tensors on rank 0 (None elsewhere) from every rank's :func:`local_parts`."""
    rank = comm.rank
    parts = comm.gather_object(mine, 0)
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


def run_check(comm, net: Network, batch: int, algorithms, seed: int, loss: float, mine: list,
              device=None, precision: str = "fp32", shards: dict | None = None) -> CheckResult:
    """Collective over ``comm``: compare with the reference on rank 0 and broadcast the verdict
    (``mine``: this rank's gradient shards, :func:`local_parts`). ``device``: a GPU backend, whose
    one-process references run on the same GPU in the run's ``precision`` (networks whose
    reference is host code, with embeddings or attention, in float32 on the host); the tolerance is
    then at least :data:`kernels.cuda.precision.CHECK_TOLERANCE` of that precision. ``shards``: what
    the plan decides of the reference's numerics (executor.check.reference.plan_shards)."""
    full = gather_full(comm, net, mine)
    result = None
    if comm.rank == 0:
        tol = max(tolerance_for(algorithms), CHECK_TOLERANCE.get(precision, BASE_TOLERANCE))
        there = device if device is not None and on_device_possible(net) else None
        ref_loss, ref_grads = reference_step(net, batch, algorithms, seed, dtype=np.float64, shards=shards)
        one_loss, one_grads = reference_step(net, batch, algorithms, seed, dtype=np.float32, device=there,
                                             shards=shards)
        other = {l.name: ("direct" if all(a == "im2col" for a in algorithms.values()) else "im2col")
                 for l in net.layers if l.op == "conv2d"}
        alt_loss, alt_grads = reference_step(net, batch, other, seed, dtype=np.float32, device=there, shards=shards)
        loss_err = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
        loss_spread = max(abs(one_loss - ref_loss), abs(alt_loss - ref_loss)) / max(abs(ref_loss), 1e-30)
        loss_allowed = max(tol, ROUNDING_SPREAD * loss_spread)
        worst_ratio, worst, worst_name, worst_allowed = loss_err / loss_allowed, loss_err, "loss", loss_allowed
        vs_one = abs(loss - one_loss) / max(abs(one_loss), 1e-30)
        total = sum(r.size for r in ref_grads.values())
        g_all = float(np.sqrt(sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in ref_grads.values())))
        for key, ref in ref_grads.items():
            floor = FLOOR * g_all * np.sqrt(ref.size / max(total, 1))
            err = rel_error(full[key], ref, floor)
            spread = max(rel_error(one_grads[key], ref, floor), rel_error(alt_grads[key], ref, floor))
            allowed = max(tol, ROUNDING_SPREAD * spread)
            vs_one = max(vs_one, rel_error(full[key], one_grads[key], floor))
            if not np.isfinite(err) or err / allowed > worst_ratio:
                worst_ratio, worst, worst_name, worst_allowed = err / allowed, err, f"{key[0]}.{key[1]}", allowed
        result = CheckResult(bool(np.isfinite(worst_ratio) and worst_ratio <= 1.0), float(worst), worst_name,
                             float(loss_err), float(worst_allowed), float(vs_one))
    return comm.bcast_object(result, 0)
