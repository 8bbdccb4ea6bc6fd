"""Executing a tiny GPT (networks/zoo/gpt-tiny.yaml): token inputs, embedding, attention, layer
norm over tokens, the tied LM head and the loss over token logits.

- the network's parameter count, by hand;
- the new kernels and ops against central finite differences (float64): the embedding gather and
  scatter-add (whole and vocabulary-sharded), the vocabulary-parallel cross-entropy, the attention
  op's fused projections, and the tied head's gradient of the token table through the whole
  reference step;
- the executor's ops call exactly the kernels costmodel.calls.layer_calls prices, at its shapes.

``dnnplan execute --check`` of it under mpiexec: tests/mpi/test_execute_gpt.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from executor.check import reference
from executor.runtime.synthetic import init_weights, make_inputs
from executor.ops import attention as attention_op, dense as dense_op, loss as loss_op, OPS
from executor.ops.embedding import tie
from kernels.embedding import embedding_backward_weights, embedding_forward
from kernels.loss import combine_vocab_rows, softmax_xent_backward, softmax_xent_forward
from networks.errors import DnnplanError
from networks.loader import load_network

from tests.support.kernel_checks import RNG, fd_directional
from tests.support.op_calls import _ctx, _local, _priced, _recording

GPT = "gpt-tiny"
D, HEADS, S, V, MLP, BLOCKS = 64, 4, 32, 256, 256, 2


def test_gpt_tiny_parameter_count_by_hand():
    embedding = V * D + S * D  # token table and learned positions
    attention = 4 * D * D + 4 * D  # fused q/k/v (3 D^2 + 3 D) and the output projection (D^2 + D)
    layernorm = 2 * D
    mlp = (D * MLP + MLP) + (MLP * D + D)
    block_params = 2 * layernorm + attention + mlp
    expected = embedding + BLOCKS * block_params + layernorm  # + ln_f; the tied head adds nothing
    assert expected == 118_528  # the figure in the spec's header comment
    net = load_network(GPT)
    assert net.num_params == expected
    assert net.layer("lm_head").p["tied_to"] == "embed" and net.layer("lm_head").num_params == 0
    assert [layer.op for layer in net.layers if layer.name.startswith("h0.")] == [
        "layernorm", "attention", "dropout", "add", "layernorm", "linear", "gelu", "linear", "dropout", "add"]


# ---------------------------------------------------------------------------------------------
# kernels against finite differences


def test_embedding_gather_and_scatter_add_against_finite_differences():
    rng = RNG(1)
    ids = rng.integers(0, 11, size=(3, 5))
    ids[0, :2] = 4  # a repeated id: its gradient rows add up
    tokens, positions = rng.standard_normal((11, 6)), rng.standard_normal((5, 6))
    r = rng.standard_normal((3, 5, 6))

    def loss(t, p):
        return float(np.sum(embedding_forward(ids, t, p)[0] * r))

    y, cache = embedding_forward(ids, tokens, positions)
    np.testing.assert_array_equal(y, tokens[ids] + positions)
    dt, dp = embedding_backward_weights(r, cache)
    fd_directional(loss, [tokens, positions], [dt, dp])
    # added INTO a given gradient (a tied head's), not over it
    start = rng.standard_normal(tokens.shape)
    summed, _ = embedding_backward_weights(r, cache, start.copy())
    np.testing.assert_allclose(summed, start + dt, rtol=1e-12)


def test_vocabulary_shards_of_the_embedding_sum_to_the_whole():
    rng = RNG(2)
    ids = rng.integers(0, 12, size=(2, 7))
    tokens, r = rng.standard_normal((12, 4)), rng.standard_normal((2, 7, 4))
    whole, wc = embedding_forward(ids, tokens)
    parts, grads = [], []
    for lo, hi in ((0, 5), (5, 12)):
        y, c = embedding_forward(ids, tokens[lo:hi], None, lo)
        parts.append(y)
        grads.append(embedding_backward_weights(r, c, with_positions=False)[0])
    np.testing.assert_allclose(parts[0] + parts[1], whole, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate(grads), embedding_backward_weights(r, wc)[0], rtol=1e-12)


def _vocab_parallel_loss(logits, labels, cuts, total):
    """The vocabulary-parallel loss and gradient, the all-reduces done by hand over the slices."""
    stats = [softmax_xent_forward(logits[..., lo:hi], labels, total, lo)[1] for lo, hi in cuts]
    row_max = np.maximum.reduce([c["lse"] for c in stats])
    exp_sum = sum(np.exp(c["lse"] - row_max) for c in stats)
    picked = sum(c["picked"] for c in stats)
    losses = []
    for c in stats:
        loss, _, c["row_scale"] = combine_vocab_rows(c["lse"], row_max, exp_sum, picked, total)
        losses.append(float(loss))
    assert max(losses) == min(losses)  # every slice holds the rows' whole loss
    return losses[0], np.concatenate([softmax_xent_backward(c) for c in stats], axis=-1)


def test_vocabulary_parallel_cross_entropy_against_the_whole_and_finite_differences():
    rng = RNG(3)
    logits = rng.standard_normal((2, 5, 9)) * 3
    labels = rng.integers(0, 9, size=(2, 5))
    cuts = ((0, 2), (2, 6), (6, 9))
    whole, cache = softmax_xent_forward(logits, labels, 10)
    loss, grad = _vocab_parallel_loss(logits, labels, cuts, 10)
    assert loss == pytest.approx(float(whole), rel=1e-12)
    np.testing.assert_allclose(grad, softmax_xent_backward(cache), rtol=1e-10, atol=1e-14)
    fd_directional(lambda z: _vocab_parallel_loss(z, labels, cuts, 10)[0], [logits], [grad])
    big, _ = _vocab_parallel_loss(logits * 1e4, labels, cuts, 10)  # stable: no overflow
    assert np.isfinite(big)


# ---------------------------------------------------------------------------------------------
# executor ops on one rank's shard (no MPI: a group of one rank all-reduces nothing)


def test_the_attention_op_against_finite_differences():
    net = load_network(GPT)
    ctx = _ctx(net, "h0.attn")
    x, r = _local(ctx), _local(ctx, "out", seed=6)
    names = [w for w, _ in ctx.layer.weights]

    def loss(x_, *ws):
        ctx.weights.update(zip(names, ws))
        return float(np.sum(attention_op.forward(ctx, [x_])[0] * r))

    w0 = [ctx.weights[w].copy() for w in names]
    _, cache = attention_op.forward(ctx, [x])
    (dx,), grads = attention_op.backward(ctx, r, cache)
    fd_directional(loss, [x, *w0], [dx, *(grads[w] for w in names)])
    # the reference's own attention (three projections, not one fused) agrees
    ctx.weights.update(zip(names, w0))
    y_ref, ref_cache = reference._forward(ctx.layer, [x], dict(ctx.weights), "", None)
    np.testing.assert_allclose(attention_op.forward(ctx, [x])[0], y_ref, rtol=1e-10, atol=1e-12)
    (dx_ref,), ref_grads = reference._backward(ctx.layer, r, ref_cache, dict(ctx.weights), "")
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-10, atol=1e-12)
    for w in names:
        np.testing.assert_allclose(grads[w], ref_grads[w], rtol=1e-10, atol=1e-12)


def test_the_tied_heads_gradient_of_the_token_table_against_finite_differences(monkeypatch):
    """Through the whole reference step (float64): the token table's gradient is the head's plus
    the embedding's; with either part missing the directional derivative would not match."""
    net = load_network(GPT)
    base = init_weights(net, 0, np.float64)
    key = ("embed", "tokens")
    _, grads = reference.reference_step(net, 2, {}, 0, np.float64)
    v = RNG(7).standard_normal(base[key].shape)
    eps = 1e-6

    def loss_at(t):
        monkeypatch.setattr(reference, "init_weights", lambda *a, **k: {**base, key: base[key] + t * v})
        return reference.reference_step(net, 2, {}, 0, np.float64)[0]

    fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
    assert float(np.sum(grads[key] * v)) == pytest.approx(fd, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# one kernel set: the ops call exactly the kernels costmodel.calls.layer_calls prices


@pytest.mark.parametrize("name,degrees", [("h0.attn", None), ("h0.attn", {"N": 2}), ("h0.attn", {"F": 2}),
                                          ("h0.attn", {"N": 2, "F": 2}), ("lm_head", None), ("lm_head", {"F": 4}),
                                          ("loss", None), ("loss", {"C": 2}), ("loss", {"N": 2, "C": 2})])
def test_the_ops_run_exactly_the_priced_kernels(monkeypatch, name, degrees):
    net = load_network(GPT)
    ctx = _ctx(net, name, degrees, batch=4, dtype=np.float32)
    module = {"attention": attention_op, "linear": dense_op, "softmax_cross_entropy": loss_op}[ctx.layer.op]
    if ctx.layer.op == "linear":
        embed_degrees = {"C" if d == "F" else d: k for d, k in (degrees or {}).items()}
        tie(ctx, _ctx(net, "embed", embed_degrees or None, batch=4, dtype=np.float32))
    if ctx.layer.op == "softmax_cross_entropy":
        ctx.labels = RNG(1).integers(0, V, size=tuple(hi - lo for lo, hi in ctx.in_blocks[0][:-1]))
    calls: list = []
    _recording(monkeypatch, module, calls)
    _, cache = module.forward(ctx, [_local(ctx).astype(np.float32)])
    dy = None if ctx.layer.op == "softmax_cross_entropy" else _local(ctx, "out").astype(np.float32)
    module.backward(ctx, dy, cache)
    assert calls == _priced(ctx)


def test_the_executor_has_the_ops_of_the_tiny_gpt():
    assert {layer.op for layer in load_network(GPT).layers} <= set(OPS)


def test_a_tied_head_whose_rows_differ_from_its_embeddings_is_refused_in_one_line():
    net = load_network(GPT)
    head = _ctx(net, "lm_head", {"N": 2}, batch=4)
    with pytest.raises(DnnplanError, match="same vocabulary rows"):
        tie(head, _ctx(net, "embed", {"F": 2}, batch=4))
    # the same degrees on other ranks: the head's vocabulary halves go by rank % 2, the table's by rank // 2
    with pytest.raises(DnnplanError, match="same vocabulary rows"):
        tie(_ctx(net, "lm_head", {"N": 2, "F": 2}, batch=4), _ctx(net, "embed", {"C": 2, "R": 2}, batch=4))
    tie(_ctx(net, "lm_head", {"N": 2, "F": 2}, batch=4), _ctx(net, "embed", {"N": 2, "C": 2}, batch=4))


def test_token_inputs_are_ids_within_the_vocabulary():
    tokens = make_inputs(load_network(GPT), 3, seed=0)["tokens"]
    assert tokens.shape == (3, S) and tokens.dtype.kind == "i"
    assert tokens.min() >= 0 and tokens.max() < V and len(np.unique(tokens)) > 20



def test_a_bf16_plans_image_is_drawn_as_floats_not_token_ids():
    # a 16-bit plan's float input (bfloat16 on a GPU) is drawn from a normal like a float32 one
    from costmodel.choices.precision import with_precision  # noqa: PLC0415

    image = make_inputs(with_precision(load_network("lenet5"), "bf16"), 2, seed=0)["image"]
    assert image.dtype.kind == "f" and image.shape[0] == 2 and 0.5 < float(image.std()) < 1.5

