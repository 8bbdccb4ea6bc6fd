"""attention: multi-head self-attention with its projections (GPT-2's ``attn`` block), and the
grouped-query form current models use (Llama 3, Mistral, Qwen2, Falcon).

Input (S, D) -> output (S, D). ``heads`` query heads of width ``head_dim`` (``dh``, default D /
heads; Gemma-7B: 16 heads of 256 on a width of 3072) and ``kv_heads`` key/value heads (default
``heads``; Ainslie et al., "GQA", EMNLP 2023: each key/value head serves ``heads / kv_heads``
query heads; one is multi-query attention, Shazeer 2019). With ``Dq = heads dh`` and
``Dkv = kv_heads dh``:

* weights: with ``kv_heads == heads`` the fused query/key/value projection ``qkv_weight`` (3, Dq, D)
  and ``qkv_bias`` (3, Dq), as GPT-2 and the executor hold them; otherwise ``q_weight`` (Dq, D),
  ``kv_weight`` (2, Dkv, D), ``q_bias`` (Dq,), ``kv_bias`` (2, Dkv); and the output projection
  ``out_weight`` (D, Dq) with ``out_bias`` (D,). ``qkv_bias`` (default ``bias``) sets the q/k/v
  biases apart from the output's (Qwen2: q/k/v biases, no output bias). Parameters
  ``D (Dq + 2 Dkv) + Dq D`` plus ``Dq + 2 Dkv`` and ``D`` biases.
* work per sample (MACs): ``S D (Dq + 2 Dkv)`` (projections in) ``+ 2 S^2 Dq`` (scores and weighted
  sum, per query head) ``+ S Dq D`` (out); backward-data twice the core's (four GEMMs against two).

Splitting heads (F) is Megatron-style: the input projection is column-parallel (input gradients
are partial sums), the output projection row-parallel (the output is a partial sum). The key/value
projection splits by key/value group, so each rank keeps whole groups with their query heads: a
degree must divide ``kv_heads`` or be a multiple of it. Above ``kv_heads`` each key/value head is
replicated on ``degree / kv_heads`` neighbouring ranks and its weight gradient summed over them (as
vLLM's ``QKVParallelLinear`` replicates them; Megatron-Core refuses such a degree,
``divide(num_query_groups, tensor_parallel_size)``). Splitting the sequence (H) exchanges keys and
values over the group (costmodel.comm.context).
``rotary`` (Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021, eq. 34)
rotates each query and key by its position: x * cos + rotate_half(x) * sin, 3 operations per element
of q and k in forward and the same in backward-data (the inverse rotation); no weights (the cos and
sin tables, S x dh each, are computed, not learned), nothing kept beyond q and k.
``qk_norm`` (Qwen3, OLMo 2; Megatron-Core's ``--qk-layernorm``) normalises each query and key head
by RMSNorm over its ``dh`` elements before the rotation, with one learned scale ``q_norm`` (dh,)
shared by the query heads and one ``k_norm`` (dh,) by the key heads: 4 operations an element of q
and k forward (square, sum, scale, weight), 8 backward; the normalised heads' inputs are kept for
backward (``rows (Dq + Dkv)`` more elements) with one reciprocal root a head and row. A head split
(F) keeps both scales whole on every rank and sums their gradients over the group.
"""

from __future__ import annotations

from networks.ops.base import N, H, F, DimSplit, LayerCost, OpDef, Param, ShapeError, clog2, need_float, need_rank

#: RMSNorm's epsilon on each query and key head under ``qk_norm`` (Qwen3's ``rms_norm_eps``; the
#: executor's op and its reference both normalise with it)
QK_NORM_EPS = 1e-6

PARAMS = (Param("heads", "pos", doc="number of query heads (must divide D unless head_dim is given)"),
          Param("kv_heads", "pos", None, "key/value heads (grouped-query attention; must divide heads; "
                                         "default: heads)"),
          Param("head_dim", "pos", None, "width of each head (default: D / heads)"),
          Param("causal", "bool", False, "mask future positions (decoder)"),
          Param("bias", "bool", True, "projection biases"),
          Param("qkv_bias", "bool", None, "biases on the query/key/value projections (default: bias)"),
          Param("rotary", "bool", False, "rotary position embeddings on queries and keys (RoFormer)"),
          Param("rotary_base", "float", None, "the base of the rotary frequencies (RoPE's theta: Llama 3's 500000); "
                "no cost, the model a framework's launch file trains (default: the framework's, 10000)"),
          Param("rope_scaling", "float", None, "Llama 3.1's rotary frequency scaling: the factor (8) dividing the "
                "low frequencies, blended over 1 to 4 wavelengths of 8,192 positions, as Megatron-LM and torchtitan "
                "apply it; no cost, the model a framework's launch file trains (default: none)"),
          Param("yarn", "bool", False, "the rotary positions scaled by YaRN (gpt-oss), which Megatron-Core rotates "
                "with eager PyTorch kernels (costmodel.calls.proxies)"),
          Param("qk_norm", "bool", False, "RMSNorm over each query and key head before the rotation (Qwen3)"),
          Param("context_exchange", "str", None, "how a split sequence exchanges keys and values: ring or "
                                                 "allgather (default: the cheaper for the step; costmodel.comm.context)"))


def head_shape(p: dict, d: int) -> tuple[int, int, int]:
    """``(heads, kv_heads, head_dim)`` with their defaults filled in (``d``: the input width). A
    local shard (costmodel.parallel.shard.local_layer) carries its own heads and head width."""
    heads = p["heads"]
    kv = p.get("kv_heads") or heads
    dh = p.get("head_dim") or d // p.get("heads_total", heads)
    return heads, kv, dh


def qkv_bias(p: dict) -> bool:
    """Whether the query/key/value projections have biases (``qkv_bias``, default ``bias``)."""
    got = p.get("qkv_bias")
    return bool(p["bias"]) if got is None else bool(got)


def infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (2,), "its input", "attention")
    need_float(dtypes[0], "attention")
    heads, kv = p["heads"], p.get("kv_heads")
    if p.get("head_dim") is None and x[1] % heads:
        raise ShapeError(f"heads={heads} must divide the width {x[1]}", "heads",
                         hint="or give head_dim, the width of each head")
    if p.get("rotary_base") is not None and not p.get("rotary"):
        raise ShapeError("rotary_base is the base of rotary positions, and this attention has none", "rotary_base",
                         hint="add rotary: true, or remove rotary_base")
    if p.get("rotary_base") is not None and p["rotary_base"] <= 1:
        raise ShapeError(f"rotary_base must be over 1, got {p['rotary_base']:g}", "rotary_base",
                         hint="give RoPE's theta, e.g. 500000")
    if p.get("rope_scaling") is not None and not p.get("rotary"):
        raise ShapeError("rope_scaling scales rotary positions, and this attention has none", "rope_scaling",
                         hint="add rotary: true, or remove rope_scaling")
    if p.get("rope_scaling") is not None and p["rope_scaling"] < 1:
        raise ShapeError(f"rope_scaling must be at least 1, got {p['rope_scaling']:g}", "rope_scaling",
                         hint="give Llama 3.1's factor, 8")
    if p.get("rope_scaling") is not None and p.get("yarn"):
        raise ShapeError("rope_scaling and yarn both scale the rotary positions", "rope_scaling",
                         hint="keep one of them")
    if p.get("yarn") and not p.get("rotary"):
        raise ShapeError("yarn scales rotary positions, and this attention has none", "yarn",
                         hint="add rotary: true, or remove yarn")
    if p.get("context_exchange") not in (None, "ring", "allgather"):
        raise ShapeError(f"unknown context_exchange '{p['context_exchange']}'", "context_exchange",
                         hint="use ring (ring attention, Megatron-Core's p2p) or allgather (Llama 3's)")
    if kv is not None and heads % kv:
        raise ShapeError(f"kv_heads={kv} must divide heads={heads}", "kv_heads",
                         hint="each key/value head serves a whole group of query heads")
    return x, dtypes[0]


def weights(p, in_shapes):
    d = in_shapes[0][1]
    heads, kv, dh = head_shape(p, d)
    dq, dkv = heads * dh, kv * dh
    if kv == heads:
        out = {"qkv_weight": (3, dq, d), "out_weight": (d, dq)}
        if qkv_bias(p):
            out["qkv_bias"] = (3, dq)
    else:
        out = {"q_weight": (dq, d), "kv_weight": (2, dkv, d), "out_weight": (d, dq)}
        if qkv_bias(p):
            out |= {"q_bias": (dq,), "kv_bias": (2, dkv)}
    if p["bias"]:
        out["out_bias"] = (d,)
    if p.get("qk_norm"):
        out |= {"q_norm": (dh,), "k_norm": (dh,)}
    return out


def costs(p, in_shapes, out_shape, n, itemsize):
    """Counts of the three GEMM stages (the core materialised: costmodel.calls.flash prices FlashAttention).
    A local shard (costmodel.parallel.shard.local_layer) passes its own ``heads`` and ``kv_heads``,
    its ``head_dim`` and ``seq_total``: split heads shrink the projections to the local heads, and a
    split sequence attends its local queries to every key."""
    s, d = in_shapes[0]
    heads, kv, dh = head_shape(p, d)
    dq, dkv = heads * dh, kv * dh
    s_k = p.get("seq_total", s)
    rows = n * s
    bias = rows * ((dq + 2 * dkv) * qkv_bias(p) + d * bool(p["bias"]))
    proj = rows * d * (2 * dq + 2 * dkv)  # q, k, v (d -> dq + 2 dkv) and out (dq -> d)
    core = 2 * n * heads * s * s_k * dh  # scores and weighted sum
    soft = n * heads * s * s_k
    act = rows * d * itemsize
    # kept for backward besides the input (OpDef.saves): q, k, v, the attention probabilities and
    # the per-head output
    kept = rows * (2 * dq + 2 * dkv) * itemsize + soft * itemsize
    wbytes = (d * (2 * dq + 2 * dkv) + dq + 2 * dkv + d) * itemsize
    rot = rows * (dq + dkv) if p.get("rotary") else 0  # q and k rotated (RoFormer), forward and backward
    rot_in = rot * itemsize + (2 * s * dh * itemsize if rot else 0)  # and the cos and sin tables
    qkn = rows * (dq + dkv) if p.get("qk_norm") else 0  # q and k heads normalised (module docstring)
    kept += qkn * itemsize + (rows * (heads + kv) * 4 if qkn else 0)  # their inputs, one fp32 root a head
    wbytes += (2 * dh * itemsize) if qkn else 0
    return LayerCost(
        # backward-data: the projections' input gradients and four GEMMs of the core (the
        # gradients of v, of the probabilities, of q and of k), twice the forward's two
        flops=(2 * (proj + core) + 5 * soft + bias + 3 * rot + 4 * qkn,
               2 * proj + 4 * core + 5 * soft + 3 * rot + 8 * qkn, 2 * proj + bias),
        work=(proj + core + soft + rot + qkn, proj + 2 * core + soft + rot + qkn, proj),
        depth=(clog2(d) + clog2(s_k) + clog2(dh) + bool(rot) + (clog2(dh) if qkn else 0),
               clog2(dq) + clog2(s_k) + clog2(dh) + bool(rot) + (clog2(dh) if qkn else 0), clog2(rows)),
        bytes_read=(act + wbytes + rot_in + qkn * itemsize, 5 * act + wbytes + rot_in + 2 * qkn * itemsize,
                    5 * act),
        bytes_written=(act + kept + rot * itemsize, act + rot * itemsize + qkn * itemsize, wbytes),
        activation_bytes=kept,
        macs=proj + core,
    )


def splits(p, in_shapes, out_shape):
    s, d = in_shapes[0]
    heads, kv, _ = head_shape(p, d)
    wts = tuple(weights(p, in_shapes))
    if kv == heads:
        head_axes = [("qkv_weight", 1), ("out_weight", 1)] + ([("qkv_bias", 1)] if qkv_bias(p) else [])
        units: tuple[tuple[str, int], ...] = ()
    else:
        grouped = ("kv_weight", "kv_bias") if qkv_bias(p) else ("kv_weight",)
        head_axes = [("q_weight", 0), ("kv_weight", 1), ("out_weight", 1)] + \
            ([("q_bias", 0), ("kv_bias", 1)] if qkv_bias(p) else [])
        units = tuple((name, kv) for name in grouped)
    return (DimSplit(N, 0, (0,), 0, partial_weight_grad=wts),
            DimSplit(H, s, (1,), 1, partial_weight_grad=wts),
            DimSplit(F, heads, (None,), None, weight_axes=tuple(head_axes), partial_out=True,
                     partial_in_grad=True,
                     partial_weight_grad=(("out_bias",) if p["bias"] else ()) + (("q_norm", "k_norm")
                                                                                 if p.get("qk_norm") else ()),
                     divides=True, weight_units=units))


OP = OpDef("attention", "multi-head self-attention with input and output projections", PARAMS, (1, 1),
           infer, weights, costs, splits)
