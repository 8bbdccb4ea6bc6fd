"""ZeRO in the executor on one process (executor.runtime.zero), as costmodel prices it.

- the shard arithmetic: pieces of ``ceil(n / r)``, rank-major packing, a reduce-scatter and an
  allgather simulated over several ranks, and the sharded momentum update over several steps equal
  to the whole one bit for bit;
- each rank holds the weights and optimiser state the cost model's ``Memory`` counts (stage 1-3).

ZeRO plans run for real under mpiexec: tests/mpi/test_execute_zero.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from costmodel.layer.cost import layer_estimate
from costmodel.choices.optimizer import Optimizer
from costmodel.parallel.strategy import make_strategy
from executor.runtime.zero import LayerZero, pack, rank_counts, shard_bounds, split_mine, unpack
from kernels.optimizer import sgd_momentum_update
from profiler import context

MACHINE = "dgx-a100"  # a datasheet machine: nothing is profiled on demand


# ---------------------------------------------------------------------------------------------
# the shard arithmetic


@pytest.mark.parametrize("n,r", [(10, 4), (7, 4), (1, 4), (6, 2), (2400, 2), (5, 3), (3, 8)])
def test_pieces_cover_the_weight_in_order_and_the_largest_is_what_the_cost_model_counts(n, r):
    bounds = shard_bounds(n, r)
    assert len(bounds) == r and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [hi - lo for lo, hi in bounds]
    assert min(sizes) >= 0 and max(sizes) == -(-n // r)  # costmodel.layer.cost: -(-elems // replicas)
    assert sum(rank_counts([n, n + 3], r)) == 2 * n + 3


def test_pack_and_unpack_are_inverse_and_rank_major():
    r = 4
    flats = [np.arange(10.0), 100 + np.arange(7.0), np.array([500.0])]
    buf = pack(flats, r)
    counts = rank_counts([f.size for f in flats], r)
    assert buf.size == 18 and counts == [6, 5, 5, 2]
    assert list(buf[:counts[0]]) == [0, 1, 2, 100, 101, 500]  # rank 0: its piece of each weight
    outs = [np.zeros_like(f) for f in flats]
    unpack(buf, outs, r)
    assert all(np.array_equal(a, b) for a, b in zip(outs, flats))


def _simulated_step(grads_by_rank, r):
    """A reduce-scatter over ``r`` simulated ranks: each rank's summed pieces."""
    sizes = [g.size for g in grads_by_rank[0]]
    total = sum(pack([g.reshape(-1) for g in grads], r) for grads in grads_by_rank)
    counts = rank_counts(sizes, r)
    starts = np.cumsum([0] + counts)
    return [split_mine(total[starts[k]:starts[k + 1]], sizes, k, r) for k in range(r)]


def test_the_sharded_update_over_steps_equals_the_whole_one_bit_for_bit():
    rng, r, lr, mom = np.random.default_rng(0), 4, 1e-2, 0.9
    shapes = [(5, 2), (7,), (1,)]
    whole = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ref_w, ref_v = [w.copy() for w in whole], [np.zeros_like(w) for w in whole]
    pieces = [[w.reshape(-1)[lo:hi].copy() for w, (lo, hi) in
               zip(whole, [shard_bounds(w.size, r)[k] for w in whole])] for k in range(r)]
    moms = [[np.zeros_like(p) for p in pk] for pk in pieces]
    for _ in range(3):
        grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(r)]
        summed = [sum(g[i] for g in grads) for i in range(len(shapes))]
        for i in range(len(shapes)):
            sgd_momentum_update(ref_w[i], ref_v[i], summed[i], lr, mom)
        for k, mine in enumerate(_simulated_step(grads, r)):
            for p, v, g in zip(pieces[k], moms[k], mine):
                sgd_momentum_update(p, v, g, lr, mom)
    gathered = np.concatenate([np.concatenate(pk) for pk in pieces])  # the allgather, rank-major
    outs = [np.empty(w.size, np.float32) for w in whole]
    unpack(gathered, outs, r)
    for got, want in zip(outs, ref_w):
        assert np.array_equal(got, want.reshape(-1))


class _Group:
    """A stand-in for a communicator (executor.backend.device.Communicator): only its size and this
    rank's place in it."""

    def __init__(self, size: int, rank: int):
        self.size, self.rank = size, rank


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("layer_name", ["fc3", "conv1"])
def test_a_rank_holds_the_weights_and_state_the_cost_model_counts(zero, layer_name):
    ctx = context.resolve("lenet5", 4, 8, MACHINE)
    layer = next(layer for layer in ctx.network.layers if layer.name == layer_name)
    strategy = make_strategy(4, {"N": 4})
    weights = {name: np.zeros(shape, np.float32) for name, shape in layer.weights}
    held = LayerZero.build(zero, layer.name, weights, {n: (("N",), _Group(4, 0)) for n in weights})
    memory = layer_estimate(layer, strategy, 8, ctx.machine, ctx.compute, optimizer=Optimizer("momentum", zero)).memory
    assert sum(v.nbytes for v in held.momentum.values()) == memory.optimizer
    on_rank = sum(w.nbytes for w in weights.values()) + sum(p.nbytes for p in held.params.values())
    assert on_rank == memory.weights  # stage 3: pieces (and empty placeholders), else whole
