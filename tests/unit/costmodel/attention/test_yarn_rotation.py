"""The YaRN-scaled rotation (``yarn`` on attention, gpt-oss's positions): refused without a rotary
attention, its kernels priced unfused as Megatron-Core runs it (Megatron-Bridge turns rope fusion
off for any position embedding but rope), counted by hand, and the published gpt-oss rows carrying
it into their specs."""

from __future__ import annotations

import pytest

from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import make_strategy
from networks.errors import DnnplanError
from networks.spec import parse_network

from tests.support.bench import load_bench

def _attn(extra: str):
    text = "\n".join(["name: t", "inputs:", "  x: {shape: [16, 64]}", "layers:",
                      f"  - {{name: attn, op: attention, heads: 4, kv_heads: 2, causal: true{extra}}}",
                      "  - {name: loss, op: softmax_cross_entropy}"])
    layer = next(x for x in parse_network(text, "<t>").layers if x.op == "attention")
    return local_layer(layer, make_strategy(1, {}), 1)


def test_yarn_without_rotary_is_refused():
    with pytest.raises(DnnplanError, match="yarn"):
        _attn(", yarn: true")
    with pytest.raises(DnnplanError, match="yarn"):
        _attn(", rotary: true, yarn: 1")


def test_the_yarn_rotation_counted_by_hand():
    """q and k of 16 tokens, 4 + 2 heads of 16: e = 1536 float32 elements. The plain rotation is one
    read and one write of e a pass; YaRN's, as _apply_rotary_pos_emb_bshd runs it: forward the
    negation of half (e), the rotated halves' concatenation (2 e), the products with cos and sin
    (2 e each), their sum (3 e) and the final concatenation (2 e): 12 e; backward the two products'
    gradients (2 e each), the negation's (e), the chunk's concatenation (2 e) and the sum of the two
    paths (3 e): 10 e."""
    e = 16 * 6 * 16

    def rotary_bytes(extra, pass_):
        plain = sum(c.bytes for c in kernel_calls(_attn(""), pass_, ""))
        return sum(c.bytes for c in kernel_calls(_attn(extra), pass_, "")) - plain

    assert rotary_bytes(", rotary: true", "fwd") == 2 * e * 4
    assert rotary_bytes(", rotary: true", "bwd_data") == 2 * e * 4
    assert rotary_bytes(", rotary: true, yarn: true", "fwd") == 12 * e * 4
    assert rotary_bytes(", rotary: true, yarn: true", "bwd_data") == 10 * e * 4
    assert rotary_bytes(", rotary: true, yarn: true", "bwd_weights") == 0


def test_every_published_gpt_oss_row_prices_the_yarn_rotation():
    pm = load_bench("published_modern")
    for row in pm.load_rows():
        yarn = {dict(x.params).get("yarn") for x in pm.network_of(row).layers if x.op == "attention"}
        assert yarn == ({True} if row["model"]["name"] == "gpt-oss-120b" else {False}), row["name"]
