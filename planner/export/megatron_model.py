"""A network's shape as Megatron-LM's GPT model names it (pure).

Read from the layers of a network :func:`planner.export.megatron_layout.gpt_layers` accepted: the
transformer layers (repeated blocks, ``networks.analysis.block_of``), the first attention layer's
width, heads and key/value heads, the first transformer layer's MLP (its first linear, halved before a
SwiGLU) or mixture of experts, the normalisation, positions and a tied head. What a network does not
say (the vocabulary comes from Megatron's tokenizer; dropout rates, biases) is left to the user.
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import Network
from planner.export.megatron_layout import blocks_of


@dataclass(frozen=True)
class GptShape:
    num_layers: int
    hidden_size: int
    heads: int
    query_groups: int | None  # key/value heads when fewer than the query heads (grouped-query attention)
    kv_channels: int | None  # a head's width when not hidden / heads
    ffn_hidden_size: int | None  # the dense MLP's hidden width, or each expert's
    swiglu: bool
    experts: int | None
    top_k: int | None
    seq_length: int
    positions: int | None  # learned absolute position embeddings
    rotary: bool
    rmsnorm: bool
    untied: bool
    qk_norm: bool = False  # RMSNorm over each query and key head (Qwen3): Megatron-Core's --qk-layernorm


def gpt_shape(net: Network) -> GptShape:
    attention = next(layer for layer in net.layers if layer.op == "attention")
    p = attention.p
    seq, hidden = attention.in_shapes[0][-2], attention.in_shapes[0][-1]
    kv = p.get("kv_heads")
    head_dim = p.get("head_dim")
    first_block = block_of(attention)
    block = [layer for layer in net.layers if block_of(layer) == first_block]
    moe = next((layer for layer in block if layer.op == "moe"), None)
    ffn, swiglu = None, False
    if moe is not None:
        ffn, swiglu = moe.p["hidden"], moe.p.get("gated", True) and moe.p.get("activation", "silu") == "silu"
    else:
        linears = [layer for layer in block if layer.op == "linear"]
        swiglu = any(layer.op == "swiglu" for layer in block)
        if linears:
            ffn = linears[0].p["features"] // (2 if swiglu else 1)
    embedding = next((layer for layer in net.layers if layer.op == "embedding"), None)
    head = next((layer for layer in reversed(net.layers) if layer.op == "linear" and block_of(layer) is None), None)
    return GptShape(
        num_layers=len(blocks_of(net.layers)), hidden_size=hidden, heads=p["heads"],
        query_groups=kv if kv and kv != p["heads"] else None,
        kv_channels=head_dim if head_dim and head_dim * p["heads"] != hidden else None,
        ffn_hidden_size=ffn, swiglu=bool(swiglu), experts=moe.p["experts"] if moe is not None else None,
        top_k=moe.p.get("top_k") if moe is not None else None, seq_length=seq,
        positions=(embedding.p.get("positions") if embedding is not None else None), rotary=bool(p.get("rotary")),
        rmsnorm=any(layer.op == "rmsnorm" for layer in net.layers),
        untied=head is not None and not head.p.get("tied_to"), qk_norm=bool(p.get("qk_norm")))


def rotary_setting(net: Network, key: str):
    """The value every rotary attention layer of ``net`` gives ``key`` (``rotary_base``,
    ``rope_scaling``; None: none gives one); one line naming the first layer that differs, where
    they do not agree: Megatron-LM and torchtitan set it once for the whole model."""
    layers = [layer for layer in net.layers if layer.op == "attention" and layer.p.get("rotary")]
    values = {layer.p.get(key) for layer in layers}
    if len(values) > 1:
        first = layers[0].p.get(key)
        odd = next(layer for layer in layers if layer.p.get(key) != first)
        raise DnnplanError(f"{key} {odd.p.get(key)} where {layers[0].name} has {first}: a framework's launch file "
                           "sets one for every layer", layer=odd.name, hint=f"give every attention layer one {key}")
    return values.pop() if values else None


def rotary_base_unstated(net: Network) -> bool:
    """Whether ``net``'s attention rotates its positions without a ``rotary_base``: the launch then
    trains at the framework's default base (10000), which a spec imported before the base was read
    (or written by hand) may not mean."""
    return rotary_setting(net, "rotary_base") is None and any(
        layer.op == "attention" and layer.p.get("rotary") for layer in net.layers)
