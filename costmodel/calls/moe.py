"""The kernel calls of a mixture-of-experts shard, per pass (pure; networks/ops/moe.py): the calls
executor.ops.moe makes, in its order, on the kernels it runs (kernels.moe_route, kernels.moe), so
that the profiler times what a step runs:

* forward: the router's GEMM (``linear.fwd``, tokens x D -> experts); ``moe_dispatch.fwd`` (the
  softmax, the top-k choice with each expert's capacity per sequence, the chosen rows copied into
  the (experts, N, capacity, D) buffer); [the dispatch all-to-all, costmodel.comm.expert];
  under an expert split the received blocks reordered by expert (``reshard.copy``);
  ``moe_experts.fwd`` (this rank's experts as batched GEMMs over the rows of its expert group:
  input projection, activation, output projection); under an expert split its output reordered
  by source rank (``reshard.copy``); [the combine all-to-all];
  ``moe_combine.fwd`` (each token's rows weighted by their routing weights); the shared experts as
  one more ``moe_experts.fwd`` over every token and their sum into the output (``add.fwd``);
* backward-data: ``moe_combine.bwd`` (the routing weights' gradient and the output gradient's rows
  into the buffer); ``moe_experts.bwd_data`` (between the two copies under an expert split); ``moe_dispatch.bwd`` (the rows' gradients back into
  tokens, the logits' gradient); the router's ``linear.bwd_data`` and its sum into the input
  gradient (``add.fwd``); the shared experts' ``moe_experts.bwd_data`` and its sum;
* backward-weights: the router's ``linear.bwd_weights``, ``moe_experts.bwd_weights``, the shared
  experts' likewise.

Rows: each local expert runs ``capacity`` rows of every sequence of every rank of its expert
group, padded with zeros where fewer came (``capacity = ceil(capacity_factor x S x top_k /
experts)``, kernels.moe.capacity): ``E_degree x N_local x capacity`` rows, the load assumption of
networks/ops/moe.py made exact as the buffer is. What the executor does not run yet (biases on
the experts, the shared experts' gate, the activation's recomputation under ``recompute_act``) is
priced on the kernels the set has: a bias as an ``add.fwd`` over the projection's output, the gate
as a ``linear.fwd`` to one, ``gelu.fwd`` for its sigmoid and ``add.fwd`` for the scale, the
recomputed activation as a ``gelu.fwd`` over the hidden rows with the activation's FLOPs and bytes,
the clamp of its inputs (``act_clamp``) as Megatron-Core runs it (:func:`clamp_calls`), recomputed
with it.

FLOPs and bytes per call are counted from the kernels' code (module functions below): GEMMs at two
a multiply-add, the activation at networks.ops.moe.ACTIVATIONS' FLOPs an element (the gated product
one more), the softmax at 5 a logit, the top-k's sort at log2(experts) a logit, its placement
(a cumulative count over choices x experts a token) at one an entry; every array read or written
once, the one-hot placement counts in 8-byte integers.
"""

from __future__ import annotations

import math

from costmodel.calls.kernel_call import KernelCall, linear_call
from costmodel.parallel.shard import LocalLayer
from networks.ir import DTYPE_BYTES
from networks.ops.moe import ACTIVATIONS, widths

#: The ``act`` field of a ``moe_experts`` call: an index into this tuple.
ACTIVATION_CODES = ("relu", "gelu", "silu")
_INDEX = 8  # bytes of an index (int64)


def capacity(capacity_factor: float, seq: int, top_k: int, experts: int) -> int:
    """Rows an expert takes from one sequence (kernels.moe.capacity; kept here so the core stays pure)."""
    return max(1, math.ceil(capacity_factor * seq * top_k / experts - 1e-9))


def _add(elems: int, dtype: str, item: int) -> KernelCall:
    return KernelCall("add.fwd", (elems,), dtype, "", elems, 3 * elems * item)


def _route_call(kernel: str, n: int, s: int, d: int, experts: int, k: int, cap: int, dtype: str,
                item: int) -> KernelCall:
    """One of the four token-movement kernels (kernels.moe_route), FLOPs and bytes from its code."""
    logits, kept, buf, tokens = n * s * experts, n * s * k * d, experts * n * cap * d, n * s * d
    if kernel == "moe_dispatch.fwd":  # softmax, sort, one-hot placement counts; zeroed buffer, rows in
        flops = (5 + math.ceil(math.log2(max(experts, 2)))) * logits + n * s * k * experts
        nbytes = 3 * logits * item + 3 * n * s * k * experts * _INDEX + (buf + 2 * kept) * item
    elif kernel == "moe_combine.fwd":  # gather, weight, scatter-add into zeroed tokens
        flops, nbytes = 2 * kept, (4 * kept + tokens) * item
    elif kernel == "moe_combine.bwd":  # dot products for the weights' gradient; weighted rows into a zeroed buffer
        flops, nbytes = 3 * kept, (3 * kept + buf + kept) * item
    else:  # moe_dispatch.bwd: rows gathered and scatter-added into zeroed tokens; the softmax's backward
        flops, nbytes = kept + 4 * logits, (3 * kept + tokens + 3 * logits) * item
    return KernelCall(kernel, (n, s, d, experts, k, cap), dtype, "", flops, nbytes)


def experts_gemm_flops(call: KernelCall) -> int:
    """The FLOPs of a ``moe_experts`` call's GEMMs (the input and output projections), from its
    shape: the rest of its FLOPs are the activation's, elementwise (:func:`_experts_call`)."""
    e, rows, d, h, gated = call.shape[:5]
    return 2 * e * rows * d * h * (gated + 2)


#: Bytes an element of a Transformer Engine FP8 cast moves: the 16-bit tensor read (2), its FP8
#: copy written row-wise for this GEMM (1) and column-wise (transposed) for the other GEMM that
#: reads it in backward (1): TE's fused cast-transpose, one pass (docs/costmodel.md, "FP8 casts")
FP8_CAST_BYTES = 4


def experts_kernels(call: KernelCall, fp8: bool = False) -> list[tuple[int, int, bool]]:
    """The kernels a ``moe_experts`` call runs one after another, each ``(FLOPs, bytes, on the
    matrix peak)``, from its shape and pass (Megatron-Core's ``TEGroupedMLP``: linear_fc1 as one
    grouped GEMM, the activation (SwiGLU's gate product fused into it) as one elementwise kernel,
    linear_fc2 as one grouped GEMM; backward the same in reverse, the weight gradients as two
    grouped GEMMs). Their FLOPs and bytes sum to the call's. With ``fp8`` (Transformer Engine FP8
    GEMMs) each GEMM's 16-bit operand is cast first: forward the inputs of fc1 (rows x D) and fc2
    (rows x hidden), backward the gradients of fc2's output (rows x D) and of fc1's output
    (rows x m hidden), each a memory-bound kernel of :data:`FP8_CAST_BYTES` an element (its copies
    for the weight gradient written in the same pass); the weights' casts are cached across
    micro-batches (costmodel.choices.precision)."""
    e, rows, d, h, gated = call.shape[:5]
    m = gated + 1
    item = DTYPE_BYTES[call.dtype]
    io, pre, hidden = e * rows * d, e * rows * m * h, e * rows * h
    fc1, fc2 = 2 * e * rows * d * m * h, 2 * e * rows * h * d
    act = call.flops - fc1 - fc2 if call.kernel != "moe_experts.bwd_weights" else 0
    cast = (lambda elems: [(0, FP8_CAST_BYTES * elems, False)]) if fp8 else (lambda elems: [])
    if call.kernel == "moe_experts.fwd":
        return [*cast(io), (fc1, (io + e * m * h * d + pre) * item, True), (act, (pre + hidden) * item, False),
                *cast(hidden), (fc2, (hidden + e * h * d + io) * item, True)]
    if call.kernel == "moe_experts.bwd_data":  # fc2's data gradient, the activation's backward, fc1's
        return [*cast(io), (fc2, (io + e * h * d + hidden) * item, True), (act, (2 * pre + hidden) * item, False),
                *cast(pre), (fc1, (pre + e * m * h * d + io) * item, True)]
    return [(fc1, (io + pre + e * m * h * d) * item, True), (fc2, (hidden + io + e * h * d) * item, True)]


def _experts_call(pass_: str, e: int, rows: int, d: int, h: int, p: dict, dtype: str, item: int) -> KernelCall:
    """``moe_experts.<pass_>`` of ``e`` experts over ``rows`` rows each (kernels.moe)."""
    m = 2 if p["gated"] else 1
    act_f, act_b = ACTIVATIONS[p["activation"]]
    gemms = 2 * e * rows * d * h * (m + 1)  # the input projection (m h wide) and the output one
    hidden, pre, weights, io = e * rows * h, e * rows * m * h, e * (m + 1) * h * d, e * rows * d
    if pass_ == "fwd":
        flops = gemms + (act_f + m - 1) * hidden
        nbytes = (2 * io + weights + 2 * pre + 2 * hidden) * item
    elif pass_ == "bwd_data":
        flops = gemms + (act_b + 3 * (m - 1)) * hidden
        nbytes = (2 * io + weights + 3 * pre + 2 * hidden) * item
    else:
        flops, nbytes = gemms, (2 * io + weights + pre + hidden) * item
    shape = (e, rows, d, h, m - 1, ACTIVATION_CODES.index(p["activation"]))
    return KernelCall(f"moe_experts.{pass_}", shape, dtype, "", flops, nbytes)


def clamp_calls(pass_: str, p: dict, rows: int, h: int, dtype: str, item: int) -> list[KernelCall]:
    """The clamp of a gated activation's inputs (``act_clamp``) as Megatron-Core runs it ahead of its
    fused activation (megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl at
    92c8482, NeMo 25.11's Megatron-LM, called by moe/experts.py TEGroupedMLP.forward; the same in the
    later containers' Megatron-Core): eager PyTorch outside the compiled kernel, fc1's output
    chunked into its gate and linear halves (views), each clamped (two elementwise kernels reading
    and writing ``rows x hidden``) and concatenated again (one copy of ``rows x 2 hidden``).
    Backward: each clamp's gradient masked by its input (reads the input and the gradient, writes
    the gradient) and the chunk's gradient concatenated (a copy); the concatenation's gradient is
    two views. Priced on the set's kernels: a clamp as ``relu`` (one comparison an element), the
    concatenation as ``concat.fwd``. None without ``act_clamp``, and none for the weights."""
    if p.get("act_clamp") is None or pass_ == "bwd_weights":
        return []
    half = rows * h
    cat = KernelCall("concat.fwd", (rows, 1, h, h), dtype, "", 0, 2 * 2 * half * item)
    if pass_ == "fwd":
        return [KernelCall("relu.fwd", (half,), dtype, "", half, 2 * half * item)] * 2 + [cat]
    return [KernelCall("relu.bwd", (half,), dtype, "", half, 3 * half * item)] * 2 + [cat]


def _unrun(pass_: str, p: dict, tokens: int, rows: int, d: int, h: int, hs: int, dtype: str,
           item: int) -> list[KernelCall]:
    """What the executor does not run yet, on the kernels the set has (module docstring)."""
    out = []
    if p.get("recompute_act") and pass_ == "bwd_data":  # the activation's forward again (moe_act recompute)
        m, act_f = (2 if p["gated"] else 1), ACTIVATIONS[p["activation"]][0]
        out += clamp_calls("fwd", p, rows, h, dtype, item)
        out.append(KernelCall("gelu.fwd", (rows * h,), dtype, "", (act_f + m - 1) * rows * h, (m + 1) * rows * h * item))
    out += clamp_calls(pass_, p, rows, h, dtype, item)
    if p["bias"] and pass_ != "bwd_weights":
        out += [_add(rows * h * (2 if p["gated"] else 1), dtype, item), _add(rows * d, dtype, item)]
    if hs and p["shared_gate"]:
        kernel = {"fwd": "linear.fwd", "bwd_data": "linear.bwd_data", "bwd_weights": "linear.bwd_weights"}[pass_]
        out.append(linear_call(kernel, tokens, d, 1, False, dtype, item))
        if pass_ != "bwd_weights":
            gelu = "gelu.fwd" if pass_ == "fwd" else "gelu.bwd"
            out += [KernelCall(gelu, (tokens,), dtype, "", 8 * tokens, 2 * tokens * item), _add(tokens * d, dtype, item)]
    return out


def moe_calls(local: LocalLayer, pass_: str, dtype: str, item: int) -> tuple[KernelCall, ...]:
    """The calls of ``pass_`` of a mixture-of-experts shard, in the executor's order (module docstring)."""
    p = local.p
    s, d = local.in_shapes[0]
    _, h, hs = widths(p)
    n, k = local.batch, p["top_k"]
    tokens = n * s
    local_e, total = p["experts"], p.get("experts_total", p["experts"])
    cap = capacity(p["capacity_factor"], s, k, total)
    rows = (total // local_e) * n * cap  # every rank of the expert group sends each local expert its buffer
    route = (n, s, d, total, k, cap, dtype, item)
    experts = _experts_call(pass_, local_e, rows, d, h, p, dtype, item)
    if total > local_e and pass_ != "bwd_weights":  # the received blocks reordered, the returned ones too
        copy = KernelCall("reshard.copy", (total, n * cap * d), dtype, "", 0, 2 * total * n * cap * d * item)
        experts = (copy, experts, copy)
    else:
        experts = (experts,)
    shared = [_experts_call(pass_, 1, tokens, d, hs, p, dtype, item)] if hs else []
    unrun = _unrun(pass_, p, tokens, local_e * rows, d, h, hs, dtype, item)
    if pass_ == "fwd":
        return (linear_call("linear.fwd", tokens, d, total, False, dtype, item),
                _route_call("moe_dispatch.fwd", *route), *experts, _route_call("moe_combine.fwd", *route),
                *shared, *([_add(tokens * d, dtype, item)] if hs else []), *unrun)
    if pass_ == "bwd_data":
        return (_route_call("moe_combine.bwd", *route), *experts, _route_call("moe_dispatch.bwd", *route),
                linear_call("linear.bwd_data", tokens, d, total, False, dtype, item), _add(tokens * d, dtype, item),
                *shared, *([_add(tokens * d, dtype, item)] if hs else []), *unrun)
    return (linear_call("linear.bwd_weights", tokens, d, total, False, dtype, item), *experts, *shared, *unrun)
