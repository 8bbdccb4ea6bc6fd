"""A :class:`Decoder` written as a network spec: the embedding, one block repeated, the final norm,
the LM head and the loss, in the form of the zoo's ``gpt2`` and ``llama2-7b``.

The block is the pre-norm transformer block (docs/network-spec.md): ``x + attn(norm1(x))`` then
``h + mlp(norm2(h))``, or with a parallel residual ``x + attn(norm1(x)) + mlp(norm2(x))`` (one
``add`` of three inputs). A gated SiLU MLP is one ``linear`` of twice the width (gate and up) then
``swiglu`` (the zoo's Llama 2 7B: the same parameters as the checkpoint's gate_proj and up_proj).
A mixture of experts replaces the MLP with one ``moe`` layer (the zoo's ``mixtral-8x7b``). Parameters
the catalogue has only once another op lands (``kv_heads``, ``head_dim``, ``qkv_bias``, the ``moe`` op)
are written only where the model needs them, after
:func:`networks.importers.hf.decoder.check_expressible` has found them in the catalogue.
"""

from __future__ import annotations

from networks.importers.hf.decoder import Decoder
from networks.importers.spec_out import header, item, scalar
from networks.importers.values import Val

BLOCK = "decoder"


def _norm(d: Decoder, name: str, inputs: str | None = None) -> dict:
    out = {"name": name, "op": d.norm.value, "eps": d.eps}
    if inputs:
        out["inputs"] = inputs
    return out


def _attention(d: Decoder, inputs: str) -> dict:
    out = {"name": "attn", "op": "attention", "inputs": inputs, "heads": d.heads}
    if d.kv_heads.value != d.heads.value:
        out["kv_heads"] = d.kv_heads
    if d.head_dim.value * d.heads.value != d.width.value:
        out["head_dim"] = d.head_dim
    out["causal"] = Val(True, "a causal language model")
    out["bias"] = d.attn_bias
    if d.qkv_bias is not None and d.qkv_bias.value != d.attn_bias.value:
        out["qkv_bias"] = d.qkv_bias
    out["rotary"] = d.rotary
    if d.rotary_base is not None and d.rotary.value:
        out["rotary_base"] = d.rotary_base
    if d.rope_scaling is not None and d.rotary.value:
        out["rope_scaling"] = d.rope_scaling
    if d.qk_norm is not None:
        out["qk_norm"] = d.qk_norm
    return out


def _moe(d: Decoder, inputs: str) -> dict:
    """The ``moe`` layer in place of the MLP: routed experts of the MLP's kind, and a shared expert
    with its sigmoid gate where the model has one (Qwen2-MoE's ``shared_expert``, ``shared_expert_gate``)."""
    ex = d.experts
    gated = d.mlp.value == "swiglu"
    act = Val("silu" if gated else "gelu", f"{d.mlp.field}: {'gated SiLU' if gated else 'GELU'} experts", d.mlp.field)
    out = {"name": "moe", "op": "moe", "inputs": inputs, "experts": ex.count, "top_k": ex.top_k, "hidden": ex.ffn,
           "gated": Val(gated, act.origin, act.field), "activation": act}
    if ex.shared_ffn is not None:
        one = f"{d.family}'s shared_expert and shared_expert_gate"
        out |= {"shared_experts": Val(1, one), "shared_hidden": ex.shared_ffn, "shared_gate": Val(True, one)}
    out["bias"] = d.mlp_bias
    return out


def _mlp(d: Decoder, inputs: str) -> tuple[list[tuple[dict, str]], str]:
    """The MLP's layers (each with a note) reading ``inputs``, and the name of its last layer."""
    if d.experts is not None:
        return [(_moe(d, inputs), "")], "moe"
    if d.mlp.value == "swiglu":
        up = {"name": "gate_up", "op": "linear", "inputs": inputs, "features": Val(2 * d.ffn.value,
              f"2 x {d.ffn.origin}"), "bias": d.mlp_bias}
        return [(up, "gate_proj and up_proj as one linear, interleaved as swiglu reads them"),
                ({"name": "act", "op": "swiglu"}, d.mlp.origin),
                ({"name": "down", "op": "linear", "features": d.width, "bias": d.mlp_bias}, "down_proj")], "down"
    fc = {"name": "fc", "op": "linear", "inputs": inputs, "features": d.ffn, "bias": d.mlp_bias}
    return [(fc, ""), ({"name": "act", "op": "gelu"}, d.mlp.origin),
            ({"name": "proj", "op": "linear", "features": d.width, "bias": d.mlp_bias}, "")], "proj"


def _dropout(d: Decoder, name: str, inputs: str) -> tuple[list[tuple[dict, str]], str]:
    if not d.dropout.value:
        return [], inputs
    return [({"name": name, "op": "dropout", "inputs": inputs, "rate": d.dropout}, "")], name


def block_layers(d: Decoder) -> list[tuple[dict, str]]:
    """The decoder block's layers, each with a note, in order."""
    residual = d.residual.value
    out: list[tuple[dict, str]] = [(_norm(d, "norm1"), d.norm.origin)]
    out.append((_attention(d, "norm1"), ""))
    drop, attn_out = _dropout(d, "attn_drop", "attn")
    out += drop
    if residual == "sequential":
        out.append(({"name": "add1", "op": "add", "inputs": ["$input", attn_out]}, "residual"))
        out.append((_norm(d, "norm2", "add1"), ""))
        mlp, last = _mlp(d, "norm2")
    elif residual == "parallel":
        out.append((_norm(d, "norm2", "$input"), f"parallel residual ({d.residual.origin})"))
        mlp, last = _mlp(d, "norm2")
    else:
        mlp, last = _mlp(d, "norm1")
        mlp[0] = (mlp[0][0], f"parallel residual sharing norm1 ({d.residual.origin})")
    out += mlp
    drop, mlp_out = _dropout(d, "mlp_drop", last)
    out += drop
    into = ["add1", mlp_out] if residual == "sequential" else ["$input", attn_out, mlp_out]
    out.append(({"name": "add2" if residual == "sequential" else "add", "op": "add", "inputs": into}, "residual"))
    return out


def top_layers(d: Decoder) -> list[tuple[dict, str]]:
    embed = {"name": "embed", "op": "embedding", "inputs": "tokens", "vocab": d.vocab, "dim": d.width}
    if d.positions is not None:
        embed["positions"] = d.positions
    out = [(embed, "")]
    if d.embed_dropout.value:
        out.append(({"name": "embed_drop", "op": "dropout", "rate": d.embed_dropout}, ""))
    out.append(({"use": BLOCK, "name": "layers{i}", "repeat": d.layers}, ""))
    out.append((_norm(d, "norm"), "the final norm"))
    head = {"name": "lm_head", "op": "linear", "features": d.vocab, "bias": Val(False, "the LM head has no bias")}
    if d.tied.value:
        head["tied_to"] = "embed"
    out.append((head, f"tied to the embedding: {d.tied.origin}" if d.tied.value else f"untied: {d.tied.origin}"))
    out.append(({"name": "loss", "op": "softmax_cross_entropy"}, "next-token loss"))
    return out


def decoder_spec(d: Decoder, name: str, intro: list[str], unread: list[str]) -> str:
    """The whole spec's YAML text: a header (``intro``, the notes, the fields not read), then the spec."""
    moe = ["- the moe layer is the router, the experts and their combine; each expert's batch at capacity factor 1 "
           "(the op's default: tokens spread evenly, none dropped)"] if d.experts is not None else []
    lines = header([*intro, *(f"- {n}" for n in d.notes), *moe,
                    *(["Not read (no effect on sizes or costs as dnnplan models them): " + ", ".join(unread)]
                      if unread else [])])
    about = (f"{d.family} decoder, {d.layers.value} blocks of width {d.width.value}, {d.seq.value} tokens "
             "(imported from a Hugging Face config)")
    lines += [f"name: {scalar(name)}",
              f"description: {scalar(about)}",
              "inputs:",
              f"  tokens: {{shape: [{d.seq.value}], dtype: int64}}  # sequence <- {d.seq.origin}",
              "blocks:",
              f"  {BLOCK}:",
              "    layers:"]
    lines += [item(6, fields, note) for fields, note in block_layers(d)]
    lines.append("layers:")
    lines += [item(2, fields, note) for fields, note in top_layers(d)]
    return "\n".join(lines) + "\n"
