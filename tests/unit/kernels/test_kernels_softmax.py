"""The softmax kernels: softmax cross-entropy (stable, and its partial losses summing to the global
mean) and attention, against loops, the formulas and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels.attention import attention_backward, attention_forward
from kernels.loss import softmax_xent_backward, softmax_xent_forward

from tests.support.kernel_checks import RNG, fd_directional


# ---------------------------------------------------------------------------------------------
# loss


def test_softmax_xent_formula_stability_and_fd():
    rng = RNG(17)
    logits = rng.standard_normal((4, 3, 10)) * 3
    labels = rng.integers(0, 10, size=(4, 3))
    loss, cache = softmax_xent_forward(logits, labels, total_count=12)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ref = -np.take_along_axis(logp, labels[..., None], -1).sum() / 12
    assert float(loss) == pytest.approx(ref, rel=1e-12)
    big, _ = softmax_xent_forward(logits * 1e4, labels, 12)
    assert np.isfinite(float(big))
    d = softmax_xent_backward(cache, dloss=2.0)
    fd_directional(lambda z: 2.0 * float(softmax_xent_forward(z, labels, 12)[0]), [logits], [d])
    assert np.isfinite(softmax_xent_backward(softmax_xent_forward(logits.astype(np.float32) * 1e4,
                                                                  labels, 12)[1])).all()


def test_softmax_xent_partial_losses_sum_to_global_mean():
    rng = RNG(18)
    logits = rng.standard_normal((8, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=8)
    whole, cw = softmax_xent_forward(logits, labels, 8)
    a, ca = softmax_xent_forward(logits[:3], labels[:3], 8)
    b, cb = softmax_xent_forward(logits[3:], labels[3:], 8)
    assert float(a + b) == pytest.approx(float(whole), rel=1e-6)
    np.testing.assert_allclose(np.concatenate([softmax_xent_backward(ca), softmax_xent_backward(cb)]),
                               softmax_xent_backward(cw), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# attention


def _ref_attention(q, k, v, causal):
    n, h, s, d = q.shape
    o = np.zeros_like(q)
    for i in range(n):
        for j in range(h):
            sc = q[i, j] @ k[i, j].T / math.sqrt(d)
            if causal:
                sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            o[i, j] = (p / p.sum(-1, keepdims=True)) @ v[i, j]
    return o


@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_loops_and_fd(causal):
    rng = RNG(19)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    o, cache = attention_forward(q, k, v, causal)
    np.testing.assert_allclose(o, _ref_attention(q, k, v, causal), rtol=1e-10, atol=1e-12)
    if causal:   # the first query sees only the first key
        np.testing.assert_allclose(o[:, :, 0], v[:, :, 0], rtol=1e-12)
    r = rng.standard_normal(o.shape)
    dq, dk, dv = attention_backward(r, cache)
    fd_directional(lambda a, b, c: float(np.sum(r * attention_forward(a, b, c, causal)[0])),
                   [q, k, v], [dq, dk, dv])


def test_attention_float32_close_to_float64():
    rng = RNG(20)
    q, k, v = (rng.standard_normal((2, 4, 16, 8)) for _ in range(3))
    o64, _ = attention_forward(q, k, v, True)
    o32, c32 = attention_forward(*(a.astype(np.float32) for a in (q, k, v)), True)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, o64, rtol=1e-5, atol=1e-5)
    assert all(g.dtype == np.float32 for g in attention_backward(o32, c32))
