"""Kernel calls for ops the kernel set has no kernel for yet: priced on the kernels that move the
same bytes and do at least the same arithmetic. Pure.

The profiled kernel set (docs/kernels.md) times no RMSNorm, SwiGLU or rotary-position kernel: the
executor runs its own array-module code for them (kernels.norm.rmsnorm_*, kernels.activation.swiglu_*,
kernels.rotary), which no profile table holds yet. The cost model prices them, on a profile table as
on the roofline (which prices attention kernel by kernel), as the unfused sequence a framework runs,
on the nearest kernels the set has:

* ``rmsnorm``: the layer-norm kernels at the same (rows, D) (:func:`costmodel.calls.layer_calls.kernel_calls`
  sends it to them directly): the same traffic, and a superset of its arithmetic (the mean and beta);
* ``swiglu``, ``silu(gate) * up``: forward silu on gelu's kernel (the same traffic, one read and one
  write an element; more arithmetic: 8 operations to silu's 4) and the product on add's (two reads,
  one write); backward (the op keeps only its input) silu again, ``dy * silu(gate)`` and ``dy * up``
  on add's kernel, then silu's gradient on gelu's;
* attention's ``rotary`` positions: q and k through gelu's forward kernel after the query/key/value
  projection, and again (the inverse rotation) before its input gradient: one read and one write an
  element, as the rotation (its cos and sin tables are small and stay in cache); a YaRN-scaled
  rotation (``yarn``) as the eager kernels Megatron-Core runs for it (:func:`yarn_rotary_calls`);
* attention's ``qk_norm``: each query and key head's RMSNorm on the layer-norm kernels at
  ``(rows x (heads + kv_heads), head_dim)``, forward and (with the scales' gradients) backward-data.

So the calls' FLOPs exceed the catalogue's for these ops (``networks.ops``); their bytes equal an
unfused run's. This module returns plain ``(kernel, shape, flops, bytes)`` tuples;
:mod:`costmodel.calls.layer_calls` makes them :class:`~costmodel.calls.kernel_call.KernelCall`\\ s, and
tests/unit/networks/test_llama.py holds every tuple equal to the call the real op (gelu, add) makes at that size.
"""

from __future__ import annotations

from costmodel.parallel.shard import LocalLayer
from networks.ops.attention import head_shape

#: Ops priced here (rmsnorm goes to the layer-norm kernels in costmodel.calls.layer_calls itself).
PROXY_OPS = frozenset({"swiglu"})

Proxy = tuple[str, tuple[int, ...], int, int]  # kernel, shape, flops, bytes


def _gelu(pass_: str, elems: int, item: int) -> Proxy:
    """gelu.fwd / gelu.bwd of ``elems`` elements, as costmodel.calls.layer_calls prices gelu (8 / 12)."""
    if pass_ == "fwd":
        return ("gelu.fwd", (elems,), 8 * elems, 2 * elems * item)
    return ("gelu.bwd", (elems,), 12 * elems, 3 * elems * item)


def _product(elems: int, item: int) -> Proxy:
    """An elementwise product on add.fwd (costmodel.calls.layer_calls.add_call): two reads, one write."""
    return ("add.fwd", (elems,), elems, 3 * elems * item)


def proxy_calls(local: LocalLayer, pass_: str, item: int) -> tuple[Proxy, ...]:
    """The calls of ``pass_`` of a :data:`PROXY_OPS` layer's local shard."""
    elems = local.batch
    for s in local.out_shape:
        elems *= s
    if pass_ == "fwd":
        return (_gelu("fwd", elems, item), _product(elems, item))
    if pass_ == "bwd_data":
        return (_gelu("fwd", elems, item), _product(elems, item), _product(elems, item), _gelu("bwd", elems, item))
    return ()


def rotary_calls(local: LocalLayer, pass_: str, item: int) -> tuple[Proxy, ...]:
    """The rotation of the local q and k (``rows x (heads + kv_heads) head_dim`` elements) an
    attention layer with ``rotary`` runs in ``pass_`` (forward and backward-data), none otherwise."""
    p = local.p
    if not p.get("rotary") or pass_ == "bwd_weights":
        return ()
    s, d = local.in_shapes[0]
    heads, kv, dh = head_shape(p, d)
    elems = local.batch * s * (heads + kv) * dh
    if p.get("yarn"):
        return yarn_rotary_calls(pass_, elems, dh, item)
    return (_gelu("fwd", elems, item),)


def yarn_rotary_calls(pass_: str, elems: int, dh: int, item: int) -> tuple[Proxy, ...]:
    """The rotation of ``elems`` q and k elements (heads of width ``dh``) as Megatron-Core runs a
    YaRN-scaled one: unfused, since Megatron-Bridge turns ``apply_rope_fusion`` off for any position
    embedding but ``rope`` (src/megatron/bridge/utils/fusions.py validate_rope_fusion_compatibility,
    called by GPTModelProvider.provide, at 5776a6d as at v0.4.2) and Megatron-Core takes the unfused
    path for a YaRN scale besides (``mscale`` != 1). ``_apply_rotary_pos_emb_bshd``
    (megatron/core/models/common/embeddings/rope_utils.py at 92c8482) runs, each an eager kernel:
    ``-x2`` on half the elements, ``cat((-x2, x1))``, ``t * cos``, ``rotated * sin``, their sum and
    ``cat((t, t_pass))`` (a copy: the whole head rotates). Backward: the two products' gradients
    (``grad * cos``, ``grad * sin``), the negation's, the chunk's gradient concatenated and the two
    paths' gradients summed. Priced on the set's kernels: a negation as ``relu.fwd``, a copy as
    ``concat.fwd``, a product with a (small, cached) table as gelu's one read and one write, a sum
    as ``add``."""
    half, rows = elems // 2, elems // dh
    neg = ("relu.fwd", (half,), half, 2 * half * item)
    cat = ("concat.fwd", (rows, 1, dh // 2, dh // 2), 0, 2 * elems * item)
    table = _gelu("fwd", elems, item)
    if pass_ == "fwd":
        copy = ("concat.fwd", (rows, 1, dh, 0), 0, 2 * elems * item)
        return (neg, cat, table, table, _product(elems, item), copy)
    return (table, table, neg, cat, _product(elems, item))


def qk_norm_calls(local: LocalLayer, pass_: str, item: int) -> tuple[Proxy, ...]:
    """The per-head RMSNorm of the local q and k an attention layer with ``qk_norm`` runs in
    ``pass_``, on the layer-norm kernels (as costmodel.calls.layer_calls prices layernorm: 7 / 12
    operations and 2 / 3 bytes an element); none otherwise."""
    p = local.p
    if not p.get("qk_norm") or pass_ == "bwd_weights":
        return ()
    s, d = local.in_shapes[0]
    heads, kv, dh = head_shape(p, d)
    rows = local.batch * s * (heads + kv)
    e = rows * dh
    if pass_ == "fwd":
        return (("layernorm.fwd", (rows, dh), 7 * e, 2 * e * item),)
    return (("layernorm.bwd", (rows, dh), 12 * e, 3 * e * item),)
