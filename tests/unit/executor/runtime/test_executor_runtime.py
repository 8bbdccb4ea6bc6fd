"""Executor runtime core, in-process (one rank on COMM_SELF) and pure pieces (pads, reshard plans).

The multi-rank checks live in test_executor_mpi.py (they spawn mpiexec)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from mpi4py import MPI

from costmodel.parallel.shard import input_layout, output_layout
from costmodel.parallel.layout import reshard_volume
from executor.check.gradients import rel_error, tolerance_for
from executor.comm.reshard import reshard_plan
from executor.runtime import synthetic
from executor.runtime.synthetic import init_weights, make_inputs
from executor.ops.base import local_pads
from executor.check.reference import reference_step
from executor.runtime.run import run_plan
from executor.runtime.timers import PHASES, Timers
from networks.errors import DnnplanError
from networks.ops.base import Window

from tests.support.cases import load, make_plan


@pytest.mark.parametrize("net_name,batch", [("lenet5", 8), ("tinyres", 4), ("edgenet", 4)])
def test_single_rank_equals_reference(net_name, batch):
    net = load(net_name)
    plan = make_plan(net, batch, 1, "data")
    res = run_plan(plan, net, MPI.COMM_SELF, steps=1, warmup=0, check=True, seed=1)
    assert res.check.passed
    assert res.check.vs_one_process <= 1e-6  # one rank computes exactly what one process does
    assert res.check.worst_rel_error <= res.check.tolerance
    ref_loss, _ = reference_step(net, batch, plan.algorithms(), 1)
    assert res.loss == pytest.approx(ref_loss, rel=1e-6)


def test_training_lowers_the_loss_and_times_every_phase():
    net = load("tinyres")
    plan = make_plan(net, 4, 1, "data")
    timers = Timers(keep_spans=True)
    res = run_plan(plan, net, MPI.COMM_SELF, steps=3, warmup=2, seed=0, timers=timers, lr=0.01)
    assert len(res.losses) == 5 and len(res.step_s) == 3
    assert res.losses[-1] < res.losses[0]
    assert res.loss == res.losses[0]
    assert all(s > 0 for s in res.step_s)
    per = timers.per_layer(range(3))
    assert set(per) == {l.name for l in net.layers}
    assert all(per["stem"][ph][0] > 0 for ph in ("fwd_compute", "bwd_compute", "update"))
    assert all(v > 0 for v in per["fc"]["fwd_compute"])
    assert {s.step for s in timers.spans} == set(range(-2, 3))
    assert {s.phase for s in timers.spans} <= set(PHASES)


def test_only_the_checked_step_runs_dropout_as_the_identity(monkeypatch):
    """The check compares the first step, with dropout as the identity on both sides; the timed
    steps after it draw their masks (the work the cost model prices for dropout)."""
    import executor.ops.pointwise as pointwise
    rates = []
    real = pointwise.dropout_forward
    monkeypatch.setattr(pointwise, "dropout_forward", lambda x, rate, seed: rates.append(rate) or real(x, rate, seed))
    net = load("tinyres")
    res = run_plan(make_plan(net, 4, 1, "data"), net, MPI.COMM_SELF, steps=2, warmup=1, check=True, seed=0)
    assert res.check.passed
    assert rates == [0.0, 0.1, 0.1, 0.1]  # the checked warm-up step, two timed steps, the memory step
    rates.clear()
    run_plan(make_plan(net, 4, 1, "data"), net, MPI.COMM_SELF, steps=2, warmup=1, check=False, seed=0,
             measure_memory=False)
    assert rates == [0.1, 0.1, 0.1]


def test_gradient_sums_of_a_shared_output_are_timed_in_its_producers_backward():
    """b1_relu feeds three layers: its gradient is summed twice (LayerEstimate.grad_sum_s), in two
    ``bwd_compute`` spans of b1_relu timed before its own backward; stem_relu's (two readers) once."""
    net = load("tinyres")
    timers = Timers(keep_spans=True)
    run_plan(make_plan(net, 2, 1, "data"), net, MPI.COMM_SELF, steps=1, warmup=0, timers=timers)
    for name, sums in (("b1_relu", 2), ("stem_relu", 1), ("b1_relu1", 0)):
        spans = sorted((sp for sp in timers.spans if sp.layer == name and sp.phase == "bwd_compute"),
                       key=lambda sp: sp.start_s)
        assert len(spans) == sums + 1
        readers = [sp for sp in timers.spans if sp.phase == "bwd_compute" and name in
                   next(layer.inputs for layer in net.layers if layer.name == sp.layer)]
        assert all(sp.start_s >= min(r.end_s for r in readers) for sp in spans[:sums])


def test_wrong_rank_count_is_refused():
    net = load("lenet5")
    plan = make_plan(net, 8, 2, "data")
    with pytest.raises(DnnplanError, match="2 devices but 1 ranks"):
        run_plan(plan, net, MPI.COMM_SELF)


def test_an_integer_input_no_embedding_reads_is_refused():
    net = load("gpt-tiny")
    emb = next(layer for layer in net.layers if layer.op == "embedding")
    assert "tokens" in emb.inputs
    cut = dataclasses.replace(net, layers=tuple(dataclasses.replace(layer, inputs=("x",)) if layer is emb
                                                else layer for layer in net.layers))
    with pytest.raises(DnnplanError, match="no embedding layer reads it"):
        make_inputs(cut, 2, 0)


def test_init_is_deterministic_and_seeded():
    net = load("lenet5")
    a, b, c = init_weights(net, 0), init_weights(net, 0), init_weights(net, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a[("conv1", "weight")], c[("conv1", "weight")])
    x = make_inputs(net, 8, 0)["image"]
    assert x.shape == (8, 1, 32, 32) and x.dtype == np.float32


def test_a_large_tensor_is_the_same_whatever_the_host_cores(monkeypatch):
    """A tensor over one block is drawn a block a generator on the host's cores: the same numbers
    with one core as with many, each block its own stream, N(0, 1) in float32."""
    shape = (3, synthetic.BLOCK // 2 + 5)  # one block and a part
    many = synthetic.standard_normal(7, "weight/x/weight", shape)
    monkeypatch.setattr(synthetic.os, "cpu_count", lambda: 1)
    assert np.array_equal(synthetic.standard_normal(7, "weight/x/weight", shape), many)
    flat = many.reshape(-1)
    assert many.dtype == np.float32 and not np.array_equal(flat[:1000], flat[synthetic.BLOCK:synthetic.BLOCK + 1000])
    assert abs(float(flat.mean())) < 0.01 and abs(float(flat.std()) - 1) < 0.01
    assert not np.array_equal(synthetic.standard_normal(8, "weight/x/weight", shape), many)


def test_local_pads_reproduce_the_global_window():
    # conv 3x3 pad 1 over 10 rows, output rows split [0,5) [5,10)
    win = Window(3, 1, 1, 1, 10)
    assert local_pads(win, (0, 5), win.needed(0, 5), 1) == (1, 0, False)
    assert local_pads(win, (5, 10), win.needed(5, 10), 1) == (0, 1, False)
    # ceil-mode pool k3 s2 p1 over 4 rows -> 3 outputs; the last window hangs past the padding
    win = Window(3, 2, 1, 1, 4)
    assert local_pads(win, (0, 3), win.needed(0, 3), 1) == (1, 1, True)
    assert local_pads(win, (0, 1), win.needed(0, 1), 1) == (1, 0, False)


def test_tolerance_by_algorithm():
    assert tolerance_for({"a": "im2col", "b": "direct"}) == 1e-4
    assert tolerance_for({"a": "im2col", "b": "winograd"}) == 2e-4
    assert rel_error(np.ones(4), np.ones(4)) == 0.0
    assert rel_error(np.zeros(4) + 1e-9, np.zeros(4), floor=1.0) == pytest.approx(2e-9)


def _size(slices) -> int:
    return int(np.prod([sl.stop - sl.start for sl in slices]))


@pytest.mark.parametrize("net_name,batch,p", [("lenet5", 8, 4), ("tinyres", 4, 4), ("edgenet", 4, 4),
                                              ("tinyres", 4, 2)])
def test_reshards_move_what_the_cost_model_counts(net_name, batch, p):
    """Rule 2: per rank, the elements the executor receives from other ranks equal
    costmodel.parallel.layout.reshard_volume, forward and backward, on every edge of a mixed plan."""
    net = load(net_name)
    plan = make_plan(net, batch, p, "mixed")
    strat = plan.strategies()
    edges = 0
    for src, dst, slot in net.edges():
        a = output_layout(net.layer(src), strat[src], batch)
        b = input_layout(net.layer(dst), strat[dst], batch, slot)
        for backward, (s, d) in ((False, (a, b)), (True, (b, a))):
            vol = reshard_volume(s, d, backward)
            plans = [reshard_plan(s, d, backward, r) for r in range(p)]
            got = [rp.recv_elems for rp in plans]
            sent = sum(rp.send_elems for rp in plans)
            assert got == list(vol.recv_elems), (src, dst, backward)
            assert sent == sum(got)
            for rp in plans:  # the sizes and offsets the reshard unpacks by, computed with its plan
                assert all(size == _size(sl) == int(np.prod(shape)) for _, sl, shape, size in rp.recvs)
                assert sum(size for *_, size in rp.recvs) == rp.recv_elems
                assert list(rp.send_displs) == list(np.cumsum((0,) + rp.send_counts[:-1]))
                assert list(rp.recv_displs) == list(np.cumsum((0,) + rp.recv_counts[:-1]))
            if vol.max_recv:  # the block copies the cost model prices: each rank writes its block once
                written = [sum(_size(sl) for _, sl in rp.local) + rp.recv_elems for rp in plans]
                assert written == list(vol.written_elems), (src, dst, backward)
        edges += 1
    assert edges >= len(net.layers) - 1
