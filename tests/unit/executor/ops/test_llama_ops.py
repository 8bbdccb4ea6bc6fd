"""The Llama-style block in the executor on one process: RMSNorm, SwiGLU, rotary positions and
per-head query/key norms (Qwen3's ``qk_norm``), the ops the zoo's llama3-8b, llama3.1-405b and qwen3
networks use.

- tiny-llama's parameter count by hand (its YAML header derives it);
- the kernels against finite differences, and the rotation by hand (a pair's length kept, position
  0 untouched, position 1 turned by 1 radian in its first pair);
- the attention op with rotary and qk_norm on one rank's shard against finite differences and the
  reference step's own code.

``dnnplan execute --check`` of them under mpiexec: tests/mpi/test_execute_llama.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from executor.ops import attention
from kernels.activation import swiglu_backward, swiglu_forward
from kernels.norm import rmsnorm_backward, rmsnorm_forward
from kernels.rotary import rotary_backward, rotary_forward
from networks.loader import load_network

from tests.support.kernel_checks import RNG, fd_directional
from tests.support.op_checks import check_op, one_rank_ctx, qwen_like


def test_tiny_llama_parameter_count_by_hand():
    d, vocab, ffn, kv = 32, 128, 64, 16  # kv: 2 key/value heads of 8
    attention_ = d * d + 2 * kv * d + d * d
    block_ = d + attention_ + d + d * 2 * ffn + ffn * d
    net = load_network("tiny-llama")
    total = sum(int(np.prod(shape)) for layer in net.layers for _, shape in layer.weights)
    assert total == vocab * d + 2 * block_ + d + vocab * d == 26_784
    assert {layer.op for layer in net.layers} >= {"rmsnorm", "swiglu", "attention"}


def test_rmsnorm_and_swiglu_backward_against_finite_differences():
    rng = RNG(1)
    x, gamma, r = rng.normal(size=(2, 5, 6)), rng.normal(size=6), rng.normal(size=(2, 5, 6))
    _, cache = rmsnorm_forward(x, gamma, 1e-5)
    fd_directional(lambda a, g: float(np.sum(r * rmsnorm_forward(a, g, 1e-5)[0])), [x, gamma],
                   list(rmsnorm_backward(r, cache)))
    # each row's root mean square is gamma's scale after the norm
    y, _ = rmsnorm_forward(x, np.ones(6), 0.0)
    np.testing.assert_allclose(np.sqrt((y * y).mean(axis=-1)), 1.0)
    r2 = rng.normal(size=(2, 5, 3))
    _, cache = swiglu_forward(x)
    fd_directional(lambda a: float(np.sum(r2 * swiglu_forward(a)[0])), [x], [swiglu_backward(r2, cache)])
    # gate j at 2j, up j at 2j + 1: silu(g) * u
    g, u = 1.5, -2.0
    y, _ = swiglu_forward(np.array([[g, u]]))
    assert y[0, 0] == pytest.approx(g / (1 + np.exp(-g)) * u)


def test_the_rotation_by_hand_and_its_backward_against_finite_differences():
    dh = 4
    x = np.zeros((1, 2, 2 * dh))
    x[0, :, 0] = 1.0  # the first feature of each head: the first pair is (x0, x2)
    x[0, :, dh] = 1.0
    y, _ = rotary_forward(x, dh)
    np.testing.assert_allclose(y[0, 0], x[0, 0])  # position 0: angle 0
    # position 1, pair 0 at base^0 = 1 radian: (1, 0) -> (cos 1, sin 1)
    np.testing.assert_allclose(y[0, 1, [0, 2]], [np.cos(1.0), np.sin(1.0)])
    np.testing.assert_allclose(y[0, 1, [dh, dh + 2]], [np.cos(1.0), np.sin(1.0)])
    rng = RNG(2)
    x, r = rng.normal(size=(2, 7, 3 * dh)), rng.normal(size=(2, 7, 3 * dh))
    y, _ = rotary_forward(x, dh)
    pairs = lambda a: np.hypot(a.reshape(2, 7, 3, dh)[..., :dh // 2], a.reshape(2, 7, 3, dh)[..., dh // 2:])
    np.testing.assert_allclose(pairs(y), pairs(x))  # a rotation keeps each pair's length
    fd_directional(lambda a: float(np.sum(r * rotary_forward(a, dh)[0])), [x], [rotary_backward(r, dh)])


@pytest.mark.parametrize("qk_norm", [False, True])
def test_rotary_attention_against_finite_differences_and_the_reference(tmp_path, qk_norm):
    ctx = one_rank_ctx(qwen_like(tmp_path) if qk_norm else "tiny-llama", "h0.attn")
    assert ("q_norm" in [w for w, _ in ctx.layer.weights]) == qk_norm
    check_op(ctx, attention)
