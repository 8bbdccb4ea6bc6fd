"""attention: multi-head self-attention with its projections (GPT-2's ``attn`` block).

Input (S, D) -> output (S, D). Weights: the fused query/key/value projection (3, D, D) with bias
(3, D), and the output projection (D, D) with bias (D,), i.e. 4*D^2 + 4*D parameters.
Work per sample: 3*S*D^2 (projections in) + 2*S^2*D (scores and weighted sum) + S*D^2 (out);
backward-data twice the core's (four GEMMs against two).
Splitting heads (F) is Megatron-style: the input projection is column-parallel (input gradients
are partial sums), the output projection row-parallel (the output is a partial sum). Splitting the
sequence (H) gathers keys and values over the group.
``rotary`` (Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021, eq. 34)
rotates each query and key by its position: x * cos + rotate_half(x) * sin, 3 operations per element
of q and k in forward and the same in backward-data (the inverse rotation); no weights (the cos and
sin tables, S x D/heads each, are computed, not learned), nothing kept beyond q and k.
"""

from __future__ import annotations

from networks.ops.base import (DimSplit, ExtraComm, LayerCost, OpDef, Param, ShapeError, clog2,
                               need_float, need_rank)

PARAMS = (Param("heads", "pos", doc="number of attention heads (must divide D)"),
          Param("causal", "bool", False, "mask future positions (decoder)"),
          Param("bias", "bool", True, "projection biases"),
          Param("rotary", "bool", False, "rotary position embeddings on queries and keys (RoFormer)"))


def infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (2,), "its input", "attention")
    need_float(dtypes[0], "attention")
    if x[1] % p["heads"]:
        raise ShapeError(f"heads={p['heads']} must divide the width {x[1]}", "heads")
    return x, dtypes[0]


def weights(p, in_shapes):
    d = in_shapes[0][1]
    out = {"qkv_weight": (3, d, d), "out_weight": (d, d)}
    if p["bias"]:
        out["qkv_bias"] = (3, d)
        out["out_bias"] = (d,)
    return out


def costs(p, in_shapes, out_shape, n, itemsize):
    """Counts of the three GEMM stages. A local shard (costmodel.layer_layouts.local_layer) passes
    ``heads_total`` and ``seq_total``: split heads shrink the projections to the local heads, and a
    split sequence attends its local queries to every key."""
    s, d = in_shapes[0]
    heads = p["heads"]
    dh = d // p.get("heads_total", heads)
    d_l = heads * dh  # projection width of the local heads
    s_k = p.get("seq_total", s)
    rows = n * s
    bias = rows * (3 * d_l + d) if p["bias"] else 0
    proj = rows * d * 4 * d_l  # q, k, v (d -> 3 d_l) and out (d_l -> d)
    core = 2 * n * heads * s * s_k * dh  # scores and weighted sum
    soft = n * heads * s * s_k
    act = rows * d * itemsize
    # kept for backward besides the input (OpDef.saves): q, k, v, the attention probabilities and
    # the per-head output
    kept = 4 * rows * d_l * itemsize + soft * itemsize
    wbytes = (4 * d * d_l + 3 * d_l + d) * itemsize
    rot = 2 * rows * d_l if p.get("rotary") else 0  # q and k rotated (RoFormer), forward and backward
    rot_in = rot * itemsize + (2 * s * dh * itemsize if rot else 0)  # and the cos and sin tables
    return LayerCost(
        # backward-data: the projections' input gradients and four GEMMs of the core (the
        # gradients of v, of the probabilities, of q and of k), twice the forward's two
        flops=(2 * (proj + core) + 5 * soft + bias + 3 * rot, 2 * proj + 4 * core + 5 * soft + 3 * rot,
               2 * proj + bias),
        work=(proj + core + soft + rot, proj + 2 * core + soft + rot, proj),
        depth=(clog2(d) + clog2(s_k) + clog2(dh) + bool(rot), clog2(d_l) + clog2(s_k) + clog2(dh) + bool(rot),
               clog2(rows)),
        bytes_read=(act + wbytes + rot_in, 5 * act + wbytes + rot_in, 5 * act),
        bytes_written=(act + kept + rot * itemsize, act + rot * itemsize, wbytes),
        activation_bytes=kept,
        macs=proj + core,
    )


def splits(p, in_shapes, out_shape):
    s, d = in_shapes[0]
    wts = tuple(weights(p, in_shapes))
    head_axes = [("qkv_weight", 1), ("out_weight", 1)]
    if p["bias"]:
        head_axes.append(("qkv_bias", 1))
    kv = (ExtraComm("fwd", "allgather", "output", 2), ExtraComm("bwd", "reduce_scatter", "output", 2))
    return (DimSplit("N", 0, (0,), 0, partial_weight_grad=wts),
            DimSplit("H", s, (1,), 1, partial_weight_grad=wts, extra=kv),
            DimSplit("F", p["heads"], (None,), None, weight_axes=tuple(head_axes), partial_out=True,
                     partial_in_grad=True, partial_weight_grad=("out_bias",) if p["bias"] else (),
                     divides=True))


OP = OpDef("attention", "multi-head self-attention with input and output projections", PARAMS, (1, 1),
           infer, weights, costs, splits)
