"""A decoder-only language model as a Hugging Face config describes it, and what the op catalogue
must have to express it.

The family readers (:mod:`networks.importers.hf.families`) fill a :class:`Decoder`; the checks
here ask the op catalogue (:data:`networks.ops.catalogue.OPS`) for every op and parameter the model
needs (grouped-query attention needs the attention op's ``kv_heads``, a mixture of experts the
``moe`` op), so a feature is refused while the catalogue lacks it and imported the moment it is
there; the spec writer (:mod:`networks.importers.hf.spec`) then writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.errors import DnnplanError
from networks.importers.values import Val
from networks.ops.catalogue import OPS

#: How each block adds its branches: ``sequential`` (x + attn(norm1(x)), then h + mlp(norm2(h))),
#: ``parallel`` (x + attn(norm1(x)) + mlp(norm2(x)): GPT-NeoX) or ``parallel_shared``
#: (x + attn(norm(x)) + mlp(norm(x)): Falcon-7B).
RESIDUALS = ("sequential", "parallel", "parallel_shared")
#: The MLP kinds: ``gelu`` (fc, GELU, proj) and ``swiglu`` (gate and up, silu(gate) * up, down).
MLPS = ("gelu", "swiglu")


@dataclass(frozen=True)
class Experts:
    """A mixture of experts in place of the MLP: ``count`` experts of width ``ffn``, ``top_k`` per
    token; ``shared_ffn``: an always-on shared expert's width (Qwen2-MoE), None when there is none."""

    count: Val
    top_k: Val
    ffn: Val
    shared_ffn: Val | None = None


@dataclass(frozen=True)
class Decoder:
    """Every size and choice of a decoder-only transformer LM, each with where it came from."""

    family: str
    width: Val
    layers: Val
    heads: Val
    kv_heads: Val
    head_dim: Val
    ffn: Val
    vocab: Val
    seq: Val
    norm: Val  # "layernorm" or "rmsnorm"
    eps: Val
    mlp: Val  # one of MLPS; its origin names the activation field
    attn_bias: Val  # the output projection's bias (and q/k/v's unless qkv_bias says otherwise)
    mlp_bias: Val
    rotary: Val
    tied: Val
    qkv_bias: Val | None = None  # q/k/v biases when they differ from the output projection's
    positions: Val | None = None  # learned position embeddings (GPT-2), None for none
    residual: Val = Val("sequential", "pre-norm blocks")
    dropout: Val = Val(0.0, "no dropout")  # after attention and after the MLP
    embed_dropout: Val = Val(0.0, "no dropout")
    experts: Experts | None = None
    qk_norm: Val | None = None  # RMSNorm over each query and key head (Qwen3), None for none
    rotary_base: Val | None = None  # rope_theta where the file gives it (no cost: the launch's model)
    rope_scaling: Val | None = None  # Llama 3.1's rope_scaling factor (no cost: the launch's model)
    notes: tuple[str, ...] = ()  # what was read and has no effect on sizes or costs, for the header


def _needs(d: Decoder, source: str, val: Val, what: str, op: str, param: str | None = None) -> None:
    """Refuse ``val`` unless the catalogue has ``op`` (and its ``param``)."""
    opdef = OPS.get(op)
    if opdef is not None and (param is None or opdef.param(param) is not None):
        return
    need = f"the {op} op's {param}" if param else f"a '{op}' op"
    raise DnnplanError(f"{val.field or val.origin}={_shown(val.value)}: {what} needs {need}, which this "
                       f"dnnplan's op catalogue does not have yet", file=source, field=val.field)


def _shown(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_expressible(d: Decoder, source: str) -> None:
    """Refuse, in one line naming the field, anything of ``d`` the op catalogue cannot express."""
    if d.heads.value and d.kv_heads.value != d.heads.value:
        if d.heads.value % d.kv_heads.value:
            raise DnnplanError(f"{d.kv_heads.field}={d.kv_heads.value} must divide {d.heads.field}="
                               f"{d.heads.value}", file=source, field=d.kv_heads.field)
        _needs(d, source, d.kv_heads, f"grouped-query attention ({d.kv_heads.value} key/value heads for "
               f"{d.heads.value} query heads)", "attention", "kv_heads")
    if d.head_dim.value * d.heads.value != d.width.value:
        _needs(d, source, d.head_dim, f"a head width other than {d.width.field} / {d.heads.field} = "
               f"{d.width.value / d.heads.value:g}", "attention", "head_dim")
    elif d.width.value % d.heads.value:
        raise DnnplanError(f"{d.heads.field}={d.heads.value} must divide {d.width.field}={d.width.value}",
                           file=source, field=d.heads.field)
    if d.qkv_bias is not None and d.qkv_bias.value != d.attn_bias.value:
        _needs(d, source, d.qkv_bias, "q/k/v projection biases apart from the output projection's",
               "attention", "qkv_bias")
    if d.experts is not None:
        _needs(d, source, d.experts.count, f"a mixture of {d.experts.count.value} experts", "moe")
        if d.experts.top_k.value > d.experts.count.value:
            raise DnnplanError(f"{d.experts.top_k.field}={d.experts.top_k.value} exceeds {d.experts.count.field}="
                               f"{d.experts.count.value}", file=source, field=d.experts.top_k.field)
        if d.experts.shared_ffn is not None:
            _needs(d, source, d.experts.shared_ffn, "a gated shared expert", "moe", "shared_gate")
