"""moe: a mixture-of-experts MLP (Shazeer et al. 2017; GShard, Lepikhin et al. 2021; Switch,
Fedus et al. 2022): a router and ``experts`` expert MLPs, each token through ``top_k`` of them, and
optionally shared experts every token goes through (Qwen2-MoE, DeepSeekMoE).

Input (S, D) -> output (S, D), per token ``x``:

* router: logits ``W_r x`` (``experts x D``, no bias), softmax over the experts, the ``top_k``
  largest kept as the routing weights ``g`` (Mixtral renormalises them over the k; the count is
  the same);
* experts: ``E_i(x) = W_out act(gate) * up`` with ``[gate; up] = W_in x`` when ``gated`` (SwiGLU,
  Mixtral, Qwen-MoE, DeepSeek: ``W_in`` is ``2 hidden x D``, gate and up interleaved on its rows
  as the ``swiglu`` op reads them), else ``W_out act(W_in x)``;
  output ``sum_k g_k E_k(x)``;
* shared experts (``shared_experts`` of width ``shared_hidden``, default ``hidden``): one dense
  MLP of ``shared_experts x shared_hidden`` (DeepSeekMoE concatenates its shared experts likewise)
  added to the output; with ``shared_gate``, scaled by ``sigmoid(w_g x)`` first (Qwen2-MoE's
  ``shared_expert_gate``, a D -> 1 linear).

Weights: ``router`` (experts, D); ``w_in`` (experts, m hidden, D) and ``w_out`` (experts, D, hidden)
with m = 2 when gated; ``b_in`` (experts, m hidden) and ``b_out`` (experts, D) with ``bias``; shared:
``shared_in`` (m Hs, D), ``shared_out`` (D, Hs), ``Hs = shared_experts x shared_hidden``, their
biases with ``bias``, ``shared_gate`` (1, D).

**Kept for backward** besides the input: the routing probabilities, the dispatched rows (the
first GEMM's input), the hidden before and after the activation (the second GEMM's input), the
outputs before the combine (the routing weights' gradient reads them), the shared experts' hidden.
Under FP8 GEMMs the two GEMM inputs are kept as Transformer Engine keeps them, in FP8, one byte an
element; ``recompute_act`` (Megatron-Core's ``recompute_modules: [moe_act]``) keeps no activation
output and recomputes it in backward (costmodel.calls.moe prices the extra kernel). With
``act_clamp`` (gpt-oss: the gate clamped from above and the linear half to ``[-c, c]`` before the
activation) the clamped copy of the hidden before the activation is kept too, unless recomputed.

**Load, as assumed** (DESIGN.md: an MoE layer's all-to-all is "stated by its capacity factor"):
the router spreads tokens evenly, and each expert's batch is padded to its capacity
``capacity_factor x tokens x top_k / experts`` (GShard, section 2.2; Switch, section 2.2), no
token dropped: the experts compute, keep and exchange ``capacity_factor x tokens x top_k`` token
rows. 1.0 is a perfectly balanced dropless run; more prices the imbalance a run tolerates.

Work per sample (MACs), ``T = S`` tokens, ``R = capacity_factor x T x top_k`` expert rows:
router ``T D experts``; experts ``R D hidden (m + 1)``; combine ``R D``; shared
``T D Hs (m + 1)`` and ``T D`` for its gate. Elementwise: the router's softmax and top-k (5 + 1 a
logit), the activation per expert hidden element (``silu`` 4 / 8 forward / backward, ``gelu`` 8 / 12,
``relu`` 1 / 1; gated adds its product: 1 / 3, so SwiGLU is swiglu's 5 / 11); ``act_clamp`` one
comparison an activation input, forward and backward.

Splits: ``N`` and ``H`` split the tokens (every weight's gradient summed over them: for the experts
that is expert data parallelism); ``E`` splits the experts over a group (expert parallelism,
Lepikhin et al. section 3.2): each rank holds ``experts / E`` experts and its own tokens (the
batch cut by N and E together, costmodel.parallel.shard), which two all-to-alls dispatch to their
experts and combine back, forward and backward (costmodel.comm.expert); ``F`` splits each
expert's hidden width (expert tensor parallelism: ``W_in`` column-, ``W_out`` row-parallel, the
output a partial sum, the input gradient too; the routing weights' gradient, the output biases
added once, and the shared gate's gradient are partial sums over it as well).
"""

from __future__ import annotations

from math import gcd

from networks.ops.base import N, E, H, F, DimSplit, LayerCost, OpDef, Param, ShapeError, clog2, need_float, need_rank

#: Operations per hidden element of each activation, (forward, backward)
ACTIVATIONS = {"silu": (4, 8), "gelu": (8, 12), "relu": (1, 1)}

PARAMS = (Param("experts", "pos", doc="number of routed experts"),
          Param("top_k", "pos", 2, "experts each token goes through"),
          Param("hidden", "pos", doc="each expert's hidden width"),
          Param("gated", "bool", True, "gated experts, act(gate) * up (SwiGLU with silu)"),
          Param("activation", "str", "silu", "the experts' activation: silu, gelu or relu"),
          Param("capacity_factor", "float", 1.0, "each expert's batch padded to this times its even share"),
          Param("shared_experts", "nonneg", 0, "experts every token goes through (one dense MLP)"),
          Param("shared_hidden", "pos", None, "each shared expert's hidden width (default: hidden)"),
          Param("shared_gate", "bool", False, "scale the shared experts' output by sigmoid(w x) (Qwen2-MoE)"),
          Param("bias", "bool", False, "biases on the experts' linears"),
          Param("recompute_act", "bool", False, "recompute the experts' activation in backward instead of "
                "keeping its output (Megatron-Core recompute_modules: moe_act)"),
          Param("act_clamp", "float", None, "gated experts' activation inputs clamped to this magnitude first "
                "(gpt-oss: 7; Megatron-Core activation_func_clamp_value)"))


#: The layer parameter costmodel.choices.moe_dispatch.with_moe_dispatch sets to the token dispatcher an
#: expert split is priced with; absent, ``alltoall`` (costmodel.comm.expert)
DISPATCH = "dispatcher"
#: The token dispatchers: Megatron-Core's ``alltoall`` (capacity buffers) and ``flex`` (DeepEP, HybridEP)
DISPATCHERS = ("alltoall", "flex")


def dispatcher(p: dict) -> str:
    """The token dispatcher of a moe layer (its :data:`DISPATCH` parameter, ``alltoall`` when absent)."""
    return str(p.get(DISPATCH, DISPATCHERS[0]))


def widths(p: dict) -> tuple[int, int, int]:
    """``(m, hidden, Hs)``: the input projection's multiple (2 when gated), the routed experts' hidden
    width and the shared experts' total width (0 without them)."""
    shared = p["shared_experts"] * (p.get("shared_hidden") or p.get("hidden_total", p["hidden"]))
    return (2 if p["gated"] else 1), p["hidden"], p.get("shared_local", shared)


def infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (2,), "its input", "moe")
    need_float(dtypes[0], "moe")
    if p["top_k"] > p["experts"]:
        raise ShapeError(f"top_k={p['top_k']} exceeds the {p['experts']} experts", "top_k",
                         hint=f"route each token to at most the {p['experts']} experts (top_k <= experts)")
    if p["activation"] not in ACTIVATIONS:
        raise ShapeError(f"unknown activation '{p['activation']}'", "activation", hint="use silu, gelu or relu")
    if p.get("act_clamp") is not None and not p["gated"]:
        raise ShapeError("act_clamp clamps a gated activation's two inputs, and the experts are not gated",
                         "act_clamp", hint="remove act_clamp, or make the experts gated")
    if p["shared_gate"] and not p["shared_experts"]:
        raise ShapeError("shared_gate scales the shared experts, and there are none", "shared_gate",
                         hint="give shared_experts, or remove shared_gate")
    return x, dtypes[0]


def weights(p, in_shapes):
    d = in_shapes[0][1]
    m, h, hs = widths(p)
    e = p["experts"]
    out = {"router": (p.get("experts_total", e), d), "w_in": (e, m * h, d), "w_out": (e, d, h)}
    if p["bias"]:
        out |= {"b_in": (e, m * h), "b_out": (e, d)}
    if hs:
        out |= {"shared_in": (m * hs, d), "shared_out": (d, hs)}
        if p["bias"]:
            out |= {"shared_b_in": (m * hs,), "shared_b_out": (d,)}
        if p["shared_gate"]:
            out["shared_gate"] = (1, d)
    return out


def costs(p, in_shapes, out_shape, n, itemsize):
    """Counts of a shard (module docstring). A local shard (costmodel.parallel.shard.local_layer)
    carries its own ``experts`` and ``hidden`` and the layer's ``experts_total``; the rows an
    expert group computes are the local tokens' ``R`` whatever the split (the load assumption)."""
    s, d = in_shapes[0]
    m, h, hs = widths(p)
    k, cf, e_total = p["top_k"], p["capacity_factor"], p.get("experts_total", p["experts"])
    act_f, act_b = ACTIVATIONS[p["activation"]]
    if m == 2:
        act_f, act_b = act_f + 1, act_b + 3
    tokens = n * s
    rows = int(round(cf * tokens * k))
    router = tokens * d * e_total
    expert = rows * d * h * (m + 1)
    shared = tokens * d * hs * (m + 1) + (tokens * d if p["shared_gate"] else 0)
    combine = rows * d
    macs = router + expert + combine + shared
    clamp = rows * m * h if p.get("act_clamp") is not None else 0  # one comparison an activation input
    elem_f = 6 * tokens * e_total + (rows * h + tokens * hs) * act_f + (tokens if p["shared_gate"] else 0) + clamp
    elem_b = 6 * tokens * e_total + (rows * h + tokens * hs) * act_b + (tokens if p["shared_gate"] else 0) + clamp
    bias = (rows * (m * h + d) + tokens * (m * hs + d) * bool(hs)) if p["bias"] else 0
    wbytes = sum(_prod(shape) for shape in weights(p, in_shapes).values()) * itemsize
    act = tokens * d * itemsize
    # kept for backward besides the input: the routing probabilities, the dispatched rows, their
    # hidden before and after the activation, their outputs before the combine; the shared
    # experts' hidden before and after the activation and their gate
    kept = (tokens * e_total + rows * (2 * d + (m + 1) * h) + tokens * (m + 1) * hs
            + (tokens if p["shared_gate"] else 0)) * itemsize - _kept_saving(p, rows, d, h, itemsize)
    if clamp and not p["recompute_act"]:
        kept += clamp * itemsize  # the clamped copy the activation reads, beside fc1's output the clamps keep
    return LayerCost(
        flops=(2 * macs + elem_f + bias, 2 * macs + elem_b, 2 * (router + expert + shared) + bias),
        work=(macs + elem_f, macs + elem_b, router + expert + shared),
        depth=(clog2(d) + clog2(e_total) + clog2(h) + 2, clog2(d) + clog2(h) + clog2(e_total) + 2, clog2(rows)),
        bytes_read=(act + wbytes + kept, act + wbytes + kept, act + kept),
        bytes_written=(act + kept, act, wbytes),
        activation_bytes=kept,
        macs=macs,
    )


def _kept_saving(p: dict, rows: int, d: int, h: int, itemsize: int) -> int:
    """Bytes of the routed experts' kept rows not held as 16-bit (module docstring, "Kept"): under
    FP8 GEMMs (``fp8_gemms``) Transformer Engine keeps the FP8 copy of each grouped GEMM's input
    for the weight gradient, one byte an element (the dispatched rows, rows x D, and the
    activation's output, rows x hidden); with ``recompute_act`` the activation's output is not
    kept at all (recomputed from its kept input in backward)."""
    one = 1 if p.get("fp8_gemms") else itemsize
    saved = (itemsize - one) * rows * d
    return saved + (itemsize if p["recompute_act"] else itemsize - one) * rows * h


def _prod(shape) -> int:
    out = 1
    for x in shape:
        out *= x
    return out


def splits(p, in_shapes, out_shape):
    s, _ = in_shapes[0]
    _, h, hs = widths(p)
    wts = tuple(weights(p, in_shapes))
    routed = ("w_in", "w_out", "b_in", "b_out")
    shared_cut = (("shared_in", 0), ("shared_out", 1), ("shared_b_in", 0))
    hidden_axes = (("w_in", 1), ("w_out", 2), ("b_in", 1)) + (shared_cut if hs else ())
    once = ("router", "b_out", "shared_b_out", "shared_gate")  # partial sums under a hidden split
    return (DimSplit(N, 0, (0,), 0, partial_weight_grad=wts),
            DimSplit(H, s, (1,), 1, partial_weight_grad=wts),
            DimSplit(E, p["experts"], (0,), 0, weight_axes=tuple((w, 0) for w in routed if w in wts),
                     partial_weight_grad=tuple(w for w in wts if w not in routed), divides=True),
            DimSplit(F, gcd(h, hs) if hs else h, (None,), None,
                     weight_axes=tuple((w, a) for w, a in hidden_axes if w in wts), partial_out=True,
                     partial_in_grad=True, partial_weight_grad=tuple(w for w in once if w in wts), divides=True))


OP = OpDef("moe", "mixture of experts: a top-k router and expert MLPs (and shared experts)", PARAMS, (1, 1),
           infer, weights, costs, splits)
