"""PyTorch FSDP's own kernels on a unit's parameters and gradients (costmodel.layer.fsdp): the
predivide factor as torch computes it, the bytes of each kernel by hand, and the step pricing them
in every micro-batch's passes only where the optimiser runs as PyTorch FSDP."""

from __future__ import annotations

import pytest

from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine
from costmodel.layer.cost import layer_estimate
from costmodel.layer.fsdp import fsdp_kernels, postdivide_factor, predivide_factor
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.choices.precision import with_precision
from costmodel.step.prediction import predict_step
from networks.loader import load_network

H100 = load_machine("dgx-h100")
ROOF = Roofline(H100)
GPT2 = with_precision(load_network("gpt2"), "bf16")


@pytest.mark.parametrize("world,pre,post", [(1, 1, 1), (2, 2, 1), (8, 4, 2), (16, 4, 4), (32, 8, 4), (64, 8, 8),
                                            (512, 32, 16)])
def test_predivide_factor_is_torchs(world, pre, post):
    """torch's ``_get_gradient_predivide_factor``: doubled while it divides the world and stays
    below world / factor (8: 1, 2, 4, and 8 / 4 = 2 is not above 4)."""
    assert predivide_factor(world) == pre
    assert postdivide_factor(world) == post


def test_each_kernel_moves_what_it_reads_and_writes():
    """A unit of two weights (800 and 8 elements) over 8 ranks (a shard of 101), bf16 compute copy,
    gradients reduced in float32, 3 micro-batches. Forward: the float32 shard cast to bf16 (101 x
    (4 + 2) = 606 bytes). Backward: the same cast (606); the views' gradients concatenated (808 x
    2 x 2 = 3,232); cast to float32 (808 x (2 + 4) = 4,848); divided by 4 in place (808 x 4 x 2 =
    6,464); the shard divided by 8 / 4 = 2 (101 x 4 x 2 = 808); added into the saved shard in two
    micro-batches of three (101 x 2 // 3 = 67 elements, 67 x 4 x 3 = 804): 16,762 bytes, 18 bytes
    an element of the unit and the shard's."""
    got = fsdp_kernels((800, 8), 101, 8, "bfloat16", 2, 4, 3)
    assert [(c.kernel, c.bytes) for c in got.fwd] == [("grad.cast", 606)]
    assert [(c.kernel, c.bytes) for c in got.bwd] == [
        ("grad.cast", 606), ("concat.fwd", 3232), ("grad.cast", 4848), ("grad.scale", 6464), ("grad.scale", 808),
        ("add.fwd", 804)]
    assert sum(c.bytes for c in got.bwd) == 808 * 18 + 606 + 808 + 804 == 16762
    assert [c.flops for c in got.bwd if c.kernel == "grad.scale"] == [808, 101]


def test_reducing_in_the_gradients_own_precision_casts_nothing():
    """``mixed_precision: PURE`` (bf16 reduction): no cast of the gradient, the divisions in bf16;
    one micro-batch: nothing accumulated; two ranks: no postdivide (2 / 2 = 1)."""
    got = fsdp_kernels((800, 8), 404, 2, "bfloat16", 2, 0, 1)
    assert [(c.kernel, c.bytes) for c in got.bwd] == [("grad.cast", 404 * 6), ("concat.fwd", 3232),
                                                      ("grad.scale", 808 * 2 * 2)]
    assert fsdp_kernels((800, 8), 808, 1, "bfloat16", 2, 4, 1).bwd == ()  # one rank: no FSDP sharding


def _step(opt: Optimizer):
    strategies, _ = megatron_strategies(GPT2, 8, 8, 1, False)
    return predict_step(GPT2, 32, strategies, default_algorithms(GPT2), H100, ROOF, opt, micro_batches=4,
                        overlap="none")


def test_the_step_prices_them_in_every_micro_batch_where_fsdp_runs():
    """GPT-2 on 8 data-parallel ranks, 4 micro-batches of 8, ZeRO-3 reducing in float32 every micro-batch: as
    PyTorch FSDP, each weighted layer's backward grows by its kernels' roofline times (and its
    forward by the shard's cast), four times a step; not as a generic ZeRO-3, nor once a step."""
    plain = Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True)
    torch_fsdp = Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True, torch_fsdp=True)
    base, fsdp = _step(plain), _step(torch_fsdp)
    layer = next(x.layer for x in fsdp.layers if x.layer.name == "h0.fc")
    elems, shard = 768 * 3072 + 3072, 768 * 3072 // 8 + 3072 // 8
    kernels = fsdp_kernels((768 * 3072, 3072), shard, 8, "bfloat16", 2, 4, 4)
    assert layer.grad_prep_s == pytest.approx(sum(ROOF.call_s(c) for c in kernels.bwd), rel=1e-12)
    # the unit's 18 bytes an element; the shard's cast (6), postdivide by 8 / 4 (8), accumulation in 3 of 4 (12)
    assert sum(c.bytes for c in kernels.bwd) == elems * 18 + shard * (6 + 8) + shard * 3 // 4 * 12
    assert all(x.layer.grad_prep_s == 0 for x in base.layers)
    weighted = {layer.name for layer in GPT2.layers if layer.weights}
    assert all((x.layer.grad_prep_s > 0) == (x.layer.name in weighted) for x in fsdp.layers)
    prep = sum(x.layer.grad_prep_s for x in fsdp.layers)
    cast = sum(x.layer.fwd_compute_s for x in fsdp.layers) - sum(x.layer.fwd_compute_s for x in base.layers)
    assert prep > 0 and cast > 0
    assert fsdp.step_s - base.step_s == pytest.approx(4 * (prep + cast), rel=1e-9)
    # reduced once a step (no_sync): not priced
    once = Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=False, torch_fsdp=True)
    assert _step(once).step_s == pytest.approx(
        _step(Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=False)).step_s, rel=1e-12)


def test_the_float32_copy_of_a_layers_gradient_is_held_while_it_is_reduced():
    """The cast makes a float32 copy of the whole gradient beside the bf16 one: h0.fc's transient
    grows by 4 bytes an element of its weights (768 x 3072 + 3072) under PyTorch FSDP reducing in
    float32, by nothing when it reduces in bf16 (no cast)."""
    elems = 768 * 3072 + 3072

    def buffers(opt):
        return next(x.layer.memory.buffers for x in _step(opt).layers if x.layer.name == "h0.fc")

    plain = buffers(Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True))
    assert buffers(Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True, torch_fsdp=True)) - plain == 4 * elems
    assert buffers(Optimizer("adam", 3, reduce_each_micro=True, torch_fsdp=True)) == buffers(
        Optimizer("adam", 3, reduce_each_micro=True))


def test_a_memo_shared_across_micro_batch_counts_prices_each_as_alone():
    """The weights' pricing is kept once for every micro-batch count (a pipeline search weighs many),
    FSDP's kernels per count: h0.fc's estimate with one memo across 1, 4 and 16 micro-batches equals
    its estimate without one, under PyTorch FSDP and a generic ZeRO-3."""
    layer = GPT2.layer("h0.fc")
    strategy, _ = megatron_strategies(GPT2, 8, 8, 1, False)
    for opt in (Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True, torch_fsdp=True),
                Optimizer("adam", 3, reduce_bytes=4)):
        memo: dict = {}
        for micro_batches in (1, 4, 16, 4):
            alone = layer_estimate(layer, strategy["h0.fc"], 8, H100, ROOF, optimizer=opt, micro_batches=micro_batches)
            kept = layer_estimate(layer, strategy["h0.fc"], 8, H100, ROOF, optimizer=opt, micro_batches=micro_batches,
                                  memo=memo)
            assert kept == alone
        assert sum(1 for k in memo if k[0] == "weights" and len(k) == 6) == 1
