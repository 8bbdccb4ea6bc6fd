"""The cost model prices the kernel calls the executor runs for a mixture of experts, one for one
(costmodel/calls/moe.py against executor/ops/moe.py): the kernels' names in order, and the
experts' batched GEMMs' shape (experts, rows, D, hidden), recorded from the op on one rank's shard,
with and without shared experts; and the executor's capacity is the cost model's."""

from __future__ import annotations


import numpy as np
import pytest

from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import input_layout, local_layer, output_layout, weight_layouts
from costmodel.parallel.layout import block
from costmodel.calls.moe import capacity
from costmodel.parallel.strategy import make_strategy
from executor.ops import moe as op
from executor.ops.base import LayerCtx
from executor.runtime.synthetic import init_weights, take
from executor.runtime.timers import Timers
from kernels import moe as k, moe_route as kr
from networks.loader import load_network

from tests.support.op_calls import _ctx, _local, _priced, _recording
from tests.support.paths import ZOO

TINY_MOE = ZOO / "tiny-moe.yaml"
BATCH = 2


class _NoComms:
    def get(self, strategy, dims):
        return None


def _net(shared: bool, tmp_path):
    if not shared:
        return load_network("tiny-moe")
    spec = TINY_MOE.read_text().replace("capacity_factor: 1.25}", "capacity_factor: 1.25, shared_experts: 1}")
    assert "shared_experts: 1" in spec
    (tmp_path / "shared.yaml").write_text(spec)
    return load_network(str(tmp_path / "shared.yaml"))


def _record(monkeypatch) -> list[tuple[str, tuple]]:
    """Every kernel the op calls, with its first argument's shape, in order."""
    got: list[tuple[str, tuple]] = []

    def wrap(module, attr, name):
        fn = getattr(module, attr)

        def run(*args, **kwargs):
            got.append((name, tuple(args[0].shape)))
            return fn(*args, **kwargs)
        monkeypatch.setattr(module, attr, run)

    for attr, name in (("linear_forward", "linear.fwd"), ("linear_backward_data", "linear.bwd_data"),
                       ("linear_backward_weights", "linear.bwd_weights"), ("add_forward", "add.fwd")):
        wrap(op, attr, name)
    for attr, name in (("dispatch_forward", "moe_dispatch.fwd"), ("dispatch_backward", "moe_dispatch.bwd"),
                       ("combine_forward", "moe_combine.fwd"), ("combine_backward", "moe_combine.bwd")):
        wrap(kr, attr, name)
    for attr, name in (("experts_forward", "moe_experts.fwd"), ("experts_backward_data", "moe_experts.bwd_data"),
                       ("experts_backward_weights", "moe_experts.bwd_weights")):
        wrap(k, attr, name)
    return got


@pytest.mark.parametrize("shared", [False, True])
def test_the_priced_calls_are_the_calls_the_executor_makes(shared, monkeypatch, tmp_path):
    net = _net(shared, tmp_path)
    layer, strategy = net.layer("h0.moe"), make_strategy(1, {})
    in_l, out_l = input_layout(layer, strategy, BATCH, 0), output_layout(layer, strategy, BATCH)
    full = init_weights(net, 0, np.float64)
    wl = weight_layouts(layer, strategy)
    weights = {w: take(full[("h0.moe", w)], block(wl[w], 0)) for w, _ in layer.weights}
    ctx = LayerCtx(layer, strategy, 0, BATCH, "", (in_l,), out_l, (block(in_l, 0),), block(out_l, 0), _NoComms(),
                   Timers(), np, weights)
    x = np.random.default_rng(0).standard_normal((BATCH, *layer.in_shapes[0]))
    got = _record(monkeypatch)
    y, cache = op.forward(ctx, [x])
    n_fwd = len(got)
    op.backward(ctx, np.ones_like(y), cache)
    local = local_layer(layer, strategy, BATCH)
    priced = {pass_: kernel_calls(local, pass_) for pass_ in ("fwd", "bwd_data", "bwd_weights")}
    assert [name for name, _ in got[:n_fwd]] == [c.kernel for c in priced["fwd"]]
    assert [name for name, _ in got[n_fwd:]] == [c.kernel for c in priced["bwd_data"] + priced["bwd_weights"]]
    # the experts' batched GEMMs: the rows the executor hands them are the priced (experts, rows, D)
    ran = [shape for name, shape in got if name == "moe_experts.fwd"]
    calls = [c.shape[:3] for c in priced["fwd"] if c.kernel == "moe_experts.fwd"]
    assert [tuple(s) for s in ran] == [tuple(c) for c in calls]
    assert len(ran) == (2 if shared else 1)


@pytest.mark.parametrize("cf,s,top_k,experts", [(1.25, 16, 2, 4), (1.0, 16, 2, 8), (1.1, 7, 1, 3), (2.0, 4096, 2, 8)])
def test_the_executor_capacity_is_the_priced_one(cf, s, top_k, experts):
    assert capacity(cf, s, top_k, experts) == k.capacity(cf, s, top_k, experts)


@pytest.mark.parametrize("degrees", [None, {"N": 2}, {"F": 2}, {"F": 4}])
def test_grouped_query_attention_runs_exactly_the_priced_kernels(monkeypatch, degrees):
    """tiny-gqa's attention (4 query heads on 2 key/value heads; under F = 4 each key/value head on
    two ranks): the op's kernels, shapes included (the core's key/value heads), are the priced ones."""
    from executor.ops import attention as attention_op  # noqa: PLC0415

    net = load_network("tiny-gqa")
    ctx = _ctx(net, "h0.attn", degrees, batch=4, dtype=np.float32)
    calls: list = []
    _recording(monkeypatch, attention_op, calls)
    _, cache = attention_op.forward(ctx, [_local(ctx).astype(np.float32)])
    attention_op.backward(ctx, _local(ctx, "out").astype(np.float32), cache)
    assert calls == _priced(ctx)
    kv = [shape[-1] for kernel, shape in calls if kernel.startswith("attention.")]
    assert kv == [2 // (degrees or {}).get("F", 1) or 1] * 2


def test_an_expert_split_reorders_the_exchanged_blocks_around_the_experts():
    """Under E the executor reorders the received rows by expert before the experts' GEMMs and their
    outputs by source rank after (one block copy each, executor.ops.moe._exchange/_return): priced
    as two ``reshard.copy`` of the whole buffer around ``moe_experts`` in each input pass."""
    layer = load_network("tiny-moe").layer("h0.moe")
    local = local_layer(layer, make_strategy(2, {"E": 2}), 8)
    cap = capacity(1.25, 16, 2, 4)
    for pass_ in ("fwd", "bwd_data"):
        names = [c.kernel for c in kernel_calls(local, pass_)]
        i = names.index(f"moe_experts.{pass_}")
        assert names[i - 1] == names[i + 1] == "reshard.copy"
        copies = [c for c in kernel_calls(local, pass_) if c.kernel == "reshard.copy"]
        assert {c.shape for c in copies} == {(4, local.batch * cap * 32)}
    assert "reshard.copy" not in [c.kernel for c in kernel_calls(local, "bwd_weights")]
