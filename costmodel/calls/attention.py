"""The kernel calls of an attention layer's shard, per pass (pure; the table of
:mod:`costmodel.calls.layer_calls` lists them with the other ops').

Forward: under grouped-query attention the query and key/value weights concatenated into one
(``concat.fwd``, the executor's once a step), the fused query/key/value projection (``linear.fwd``
of width ``(heads + 2 kv_heads) dh``),
the per-head q/k norms and the rotary positions if any, the core (``attention.fwd``, its shape carrying the shard's query
and key/value heads: grouped-query attention is timed with its own key/value heads), the output
projection; backward-data:
the output projection's input gradient, the core (``attention.bwd``), the rotation back, the q/k/v
projection's input gradient; backward-weights: the two projections' weight gradients.

The core runs one of two algorithms (a kernel choice of the layer's plan, apart from
recomputation; docs/costmodel.md, "Attention algorithms"):

* ``materialized`` (also ``""``, the CPU's and the executor's kernels.attention): the scores and
  probabilities written to memory between kernels, :func:`attention_core_kernels`;
* ``flash``: FlashAttention-2, one fused kernel per pass, its FLOPs and bytes from its tiles in the
  device's on-chip memory (:mod:`costmodel.calls.flash`; ``sram_bytes`` per SM, ``None`` for a call a
  profile times on the device itself, whose work is then counted at FlashAttention-2's largest
  tile). Its call carries the algorithm, ``attention.fwd|...|flash``, so a profile never mistakes
  one for the other.
"""

from __future__ import annotations

from costmodel.calls.flash import flash_counts
from costmodel.calls.kernel_call import KernelCall, linear_call
from costmodel.calls.proxies import qk_norm_calls, rotary_calls
from costmodel.parallel.shard import LocalLayer
from networks.errors import DnnplanError
from networks.ops.attention import head_shape, qkv_bias

#: The attention algorithms a layer's plan may name (the kernel choice); ``""`` is the machine's default
ATTENTION_ALGORITHMS = ("flash", "materialized")


def attention_core_kernels(n: int, heads: int, sq: int, sk: int, dh: int, item: int,
                           backward: bool) -> tuple[tuple[int, int, bool], ...]:
    """(FLOPs, bytes, is a GEMM) of each kernel of the materialised attention core, in the order
    they run (kernels.attention; Megatron-LM's unfused attention likewise materialises the scores):
    the score matrix ``e = n heads sq sk`` is written by one kernel and read by the next, so its
    traffic counts once per kernel that touches it. Forward: scores = q k^T, softmax, out = p v.
    Backward: dv = p^T do, dp = do v^T, the softmax's backward (reads p and dp, writes ds),
    dq = ds k, dk = ds^T q."""
    e, q, kv = n * heads * sq * sk, n * heads * sq * dh, n * heads * sk * dh
    gemm = 2 * e * dh
    if not backward:
        return ((gemm, (q + kv + e) * item, True), (5 * e, 2 * e * item, False), (gemm, (e + kv + q) * item, True))
    return ((gemm, (e + q + kv) * item, True), (gemm, (q + kv + e) * item, True), (5 * e, 3 * e * item, False),
            (gemm, (e + kv + q) * item, True), (gemm, (e + q + kv) * item, True))


def core_call(local: LocalLayer, backward: bool, algorithm: str, sram_bytes: int | None, dtype: str,
              item: int) -> KernelCall:
    """The attention core of a shard: ``attention.fwd`` or ``attention.bwd`` under ``algorithm``."""
    p = local.p
    s_l, d = local.in_shapes[0]
    s_k = local.layer.in_shapes[0][0]  # keys and values are exchanged over a sequence split
    heads, kv, dh = head_shape(p, d)
    causal = bool(p["causal"])
    shape = (local.batch, heads, s_l, s_k, dh, int(causal), kv)
    kernel = "attention.bwd" if backward else "attention.fwd"
    if algorithm == "flash":
        if sram_bytes is not None and sram_bytes <= 0:
            raise DnnplanError("flash attention is priced from the device's on-chip memory, which this machine "
                               "does not give", layer=local.layer.name,
                               hint="add device.sram_kib_per_sm to the machine file (docs/machines.md)")
        got = flash_counts(local.batch, heads, s_l, s_k, dh, causal, item, sram_bytes, backward)
        return KernelCall(kernel, shape, dtype, "flash", got.flops, got.bytes)
    kernels = attention_core_kernels(local.batch, heads, s_l, s_k, dh, item, backward)
    return KernelCall(kernel, shape, dtype, "", sum(k[0] for k in kernels), sum(k[1] for k in kernels))


def _fused_weight_calls(local: LocalLayer, dq: int, dkv: int, d: int, bias: bool, dtype: str,
                        item: int) -> tuple[KernelCall, ...]:
    """Grouped-query attention's query and key/value weights (and biases) made one projection
    weight, once a step before the forward GEMM (``concat.fwd`` of (1, dq, D) and (1, 2 dkv, D)
    blocks; executor.ops.attention); none where the layer holds one fused weight."""
    if "q_weight" not in dict(local.layer.weights):
        return ()
    out = [KernelCall("concat.fwd", (1, d, dq, 2 * dkv), dtype, "", 0, 2 * (dq + 2 * dkv) * d * item)]
    if bias:
        out.append(KernelCall("concat.fwd", (1, 1, dq, 2 * dkv), dtype, "", 0, 2 * (dq + 2 * dkv) * item))
    return tuple(out)


def attention_calls(local: LocalLayer, pass_: str, dtype: str, item: int, algorithm: str = "",
                    sram_bytes: int | None = None) -> tuple[KernelCall, ...]:
    """The calls of ``pass_`` of an attention shard (module docstring)."""
    p = local.p
    s_l, d = local.in_shapes[0]
    heads, kv, dh = head_shape(p, d)
    d_l, qkv = heads * dh, (heads + 2 * kv) * dh  # the local heads' width; q, k and v's (one fused GEMM)
    rows = local.batch * s_l
    bias, in_bias = bool(p["bias"]), qkv_bias(p)
    rope = tuple(KernelCall(k, s, dtype, "", f, b)
                 for k, s, f, b in qk_norm_calls(local, pass_, item) + rotary_calls(local, pass_, item))
    if pass_ == "fwd":
        return (*_fused_weight_calls(local, d_l, kv * dh, d, in_bias, dtype, item),
                linear_call("linear.fwd", rows, d, qkv, in_bias, dtype, item), *rope,
                core_call(local, False, algorithm, sram_bytes, dtype, item),
                linear_call("linear.fwd", rows, d_l, d, bias, dtype, item))
    if pass_ == "bwd_data":
        return (linear_call("linear.bwd_data", rows, d_l, d, bias, dtype, item),
                core_call(local, True, algorithm, sram_bytes, dtype, item), *rope,
                linear_call("linear.bwd_data", rows, d, qkv, in_bias, dtype, item))
    return (linear_call("linear.bwd_weights", rows, d_l, d, bias, dtype, item),
            linear_call("linear.bwd_weights", rows, d, qkv, in_bias, dtype, item))
