"""The loss's ``fused`` kernel (Transformer Engine's parallel_cross_entropy, as Megatron-Core's
``cross_entropy_fusion_impl: te`` runs it): what backward keeps, counted by hand (networks/ops/loss.py)."""

from __future__ import annotations

import pytest

from costmodel.choices.precision import with_precision
from networks.analysis import layer_cost
from networks.spec import parse_network

ROWS, VOCAB = 8, 1000


def _loss(fused: bool, precision: str):
    text = "\n".join(["name: t", "inputs:", "  x: {shape: [8, 16]}", "layers:",
                      f"  - {{name: fc, op: linear, features: {VOCAB}}}",
                      f"  - {{name: loss, op: softmax_cross_entropy, fused: {str(fused).lower()}}}"])
    return with_precision(parse_network(text, "<t>"), precision).layer("loss")


@pytest.mark.parametrize("precision, item", [("bf16", 2), ("fp32", 4)])
def test_fused_keeps_the_logits_in_their_precision_and_three_numbers_a_row(precision, item):
    assert layer_cost(_loss(True, precision), 3).activation_bytes == 3 * ROWS * (VOCAB * item + 3 * 4)


def test_unfused_keeps_float32_log_probabilities_whatever_the_logits():
    loss = _loss(False, "bf16")
    assert loss.dtype == "float32"
    assert layer_cost(loss, 3).activation_bytes == 3 * ROWS * VOCAB * 4
