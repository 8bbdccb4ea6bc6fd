"""The experts' clamped gated activation (``act_clamp``, gpt-oss's activation_func_clamp_value 7):
bad values refused in one line naming the field, and its kernels priced as Megatron-Core runs
them (costmodel.calls.moe.clamp_calls: two clamps and a concatenation ahead of the fused
activation, their gradients in backward, recomputed with the activation under moe_act), counted
by hand; what the layer keeps; and the published gpt-oss rows carrying it into their specs."""

from __future__ import annotations

from collections import Counter

import pytest

from costmodel.calls.layer_calls import kernel_calls
from costmodel.compute.roofline import local_cost
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import make_strategy
from networks.errors import DnnplanError
from networks.spec import parse_network

from tests.support.bench import load_bench

S, D, E, K, HID = 256, 64, 8, 2, 32
ROWS = S * K  # every expert's capacity rows, summed over the experts of one rank holding them all


def _net(moe: str = ""):
    text = "\n".join(["name: t", "inputs:", f"  x: {{shape: [{S}, {D}]}}", "layers:",
                      f"  - {{name: moe, op: moe, experts: {E}, top_k: {K}, hidden: {HID}{moe}}}",
                      "  - {name: loss, op: softmax_cross_entropy}"])
    return parse_network(text, "<t>")


def _local(moe: str = ""):
    layer = next(x for x in _net(moe).layers if x.op == "moe")
    return local_layer(layer, make_strategy(1, {}), 1)


def _extra(moe: str, pass_: str) -> Counter:
    """The calls ``moe`` adds to the plain gated layer's in ``pass_``, as (kernel, shape, FLOPs, bytes)."""
    def calls(text):
        return Counter((c.kernel, c.shape, c.flops, c.bytes) for c in kernel_calls(_local(text), pass_, ""))
    base = ", recompute_act: true" if "recompute_act" in moe else ""
    with_clamp, without = calls(moe), calls(base)
    assert not without - with_clamp  # nothing of the plain layer's is dropped
    return with_clamp - without


@pytest.mark.parametrize("value", ["0", "-7", "x", "true", ".inf"])
def test_a_bad_clamp_is_refused_in_one_line_naming_the_field(value):
    with pytest.raises(DnnplanError) as err:
        _net(f", act_clamp: {value}")
    assert "act_clamp" in str(err.value) and "\n" not in str(err.value).strip()


def test_a_clamp_on_ungated_experts_is_refused():
    with pytest.raises(DnnplanError, match="act_clamp.*not gated|not gated.*act_clamp"):
        _net(", gated: false, activation: gelu, act_clamp: 7")


def test_the_clamp_kernels_counted_by_hand():
    """float32 (4 bytes). Forward: each half of fc1's output (ROWS x HID) clamped, read and written,
    then both concatenated, read and written (ROWS x 2 HID). Backward: each clamp's gradient reads
    its input and the gradient and writes the gradient, and the two halves' gradients are
    concatenated. No weight-gradient kernel."""
    half = ROWS * HID
    fwd = Counter({("relu.fwd", (half,), half, 2 * half * 4): 2,
                   ("concat.fwd", (ROWS, 1, HID, HID), 0, 2 * 2 * half * 4): 1})
    bwd = Counter({("relu.bwd", (half,), half, 3 * half * 4): 2,
                   ("concat.fwd", (ROWS, 1, HID, HID), 0, 2 * 2 * half * 4): 1})
    assert _extra(", act_clamp: 7", "fwd") == fwd
    assert _extra(", act_clamp: 7", "bwd_data") == bwd
    assert _extra(", act_clamp: 7", "bwd_weights") == Counter()
    # under moe_act the forward's clamps and concatenation run again in backward, before the activation
    assert _extra(", recompute_act: true, act_clamp: 7", "bwd_data") == bwd + fwd


def test_the_clamped_copy_is_kept_unless_the_activation_is_recomputed():
    """The activation reads the clamped concatenation (ROWS x 2 HID) and keeps it for its backward,
    beside fc1's output the clamps keep; under moe_act neither is kept past the forward."""
    kept = {moe: local_cost(_local(moe)).activation_bytes
            for moe in ("", ", act_clamp: 7", ", recompute_act: true", ", recompute_act: true, act_clamp: 7")}
    assert kept[", act_clamp: 7"] - kept[""] == ROWS * 2 * HID * 4  # float32
    assert kept[", recompute_act: true, act_clamp: 7"] == kept[", recompute_act: true"]


def test_every_published_gpt_oss_row_prices_the_clamp():
    """Every gpt-oss row's spec carries act_clamp 7.0 (GPTOSSProvider's activation_func_clamp_value),
    and no other model's does."""
    pm = load_bench("published_modern")
    rows = pm.load_rows()
    oss = [r for r in rows if r["model"]["name"] == "gpt-oss-120b"]
    assert len(oss) == 9
    for row in rows:
        clamps = {dict(x.params).get("act_clamp") for x in pm.network_of(row).layers if x.op == "moe"}
        assert clamps == ({7.0} if row in oss else {None} if row["model"].get("moe") else set()), row["name"]


def test_a_dense_row_with_a_clamp_is_refused():
    """The bench prices act_clamp on experts only: a dense model naming it is refused, not priced
    as if unclamped."""
    pm = load_bench("published_modern")
    row = next(r for r in pm.load_rows() if not r["model"].get("moe"))
    row = {**row, "model": {**row["model"], "act_clamp": 7.0}}
    with pytest.raises(SystemExit, match="act_clamp"):
        pm.model_spec(row)
