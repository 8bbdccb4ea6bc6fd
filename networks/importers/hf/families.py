"""The Hugging Face model families dnnplan imports, one reader each: config fields -> :class:`Decoder`.

Field names and defaults follow each family's configuration class in ``transformers``
(``GPT2Config``, ``LlamaConfig``, ``MistralConfig``, ``MixtralConfig``, ``Qwen2Config``,
``Qwen2MoeConfig``, ``GemmaConfig``, ``Phi3Config``, ``GPTNeoXConfig``, ``FalconConfig``): a field
the file leaves out takes the class's default, and the spec's comment says so. What a family can
do that the spec cannot (sliding windows longer than nothing, partial rotary, ALiBi, a GELU that is
not the tanh approximation, a gated GELU) is refused here naming the field.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from networks.errors import short
from networks.importers.hf.config import Config
from networks.importers.hf.decoder import Decoder, Experts
from networks.importers.values import Val, derived

#: Activations the catalogue's ``gelu`` op computes: the tanh approximation (GPT-2's gelu_new).
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
SILU = ("silu", "swish")


def _seq(cfg: Config, seq: int | None, field: str, default=None, aliases: tuple[str, ...] = ()) -> Val:
    if seq is not None:
        return Val(seq, "--seq")
    most = cfg.whole(field, default, aliases) if default is not None else cfg.whole(field, aliases=aliases)
    return Val(most.value, f"{most.origin} (the longest sequence; --seq sets another)", most.field)


def _activation(cfg: Config, act: Val, gated: bool) -> Val:
    """The MLP kind for activation ``act``: 'swiglu' for a gated SiLU, 'gelu' for a plain tanh GELU."""
    name = act.value
    if gated and name in SILU:
        return Val("swiglu", f"{act.field}={name}, gated (gate_proj, up_proj)", act.field)
    if not gated and name in TANH_GELU:
        return Val("gelu", f"{act.field}={name}", act.field)
    kind = "gated " if gated else ""
    have = "SiLU (swiglu)" if gated else "the tanh approximation of GELU (gelu_new)"
    # a default, not the file's: said so (the field the message names is not in the file)
    given = f"{act.field}={name}" + ("" if act.origin == act.field else
                                      f" ({cfg.family}'s default: the file sets none)")
    raise cfg.fail(act.field, f"{given}: a {kind}{name} MLP is not in the op catalogue, whose "
                   f"{kind}MLP activation is {have}", hint="the model cannot be expressed as a network spec today")


def _sliding(cfg: Config, seq: Val, window: Val | None, notes: list[str]) -> None:
    """A sliding window at least as long as the sequence is full causal attention; a shorter one is refused."""
    if window is None or window.value is None:
        return
    if window.value < seq.value:
        given = f"{window.field}={window.value}" + ("" if window.origin == window.field else
                                                    f" ({cfg.family}'s default: the file sets none)")
        raise cfg.fail(window.field, f"{given} is shorter than the sequence {seq.value}: "
                       "sliding-window attention is not in the op catalogue",
                       hint=f"import with --seq {window.value} or less, where the window is the whole sequence")
    notes.append(f"{window.field}={window.value} covers the whole sequence of {seq.value}: full causal attention")


def _rotary_whole(cfg: Config, field: str, notes: list[str]) -> None:
    if not cfg.has(field):
        return
    part = cfg.number(field)
    if part.value != 1.0:
        raise cfg.fail(field, f"{field}={part.value:g}: rotary embeddings on part of each head are not in the "
                       "op catalogue, whose rotary rotates the whole head",
                       hint="the model cannot be expressed as a network spec today")
    notes.append(f"{field}=1: rotary on the whole head")


def _head_dim(cfg: Config, width: Val, heads: Val) -> Val:
    """The head width when the config does not give one: the width over the heads, which must divide it."""
    if width.value % heads.value:
        raise cfg.fail(heads.field, f"{heads.field}={heads.value} must divide {width.field}={width.value}")
    return derived(width.value // heads.value, f"{width.field} / {heads.field}", "head_dim")


def _rope(cfg: Config) -> tuple[Any, Any, str, str]:
    """(theta, scaling, the fields they are read from): transformers' ``rope_theta`` and
    ``rope_scaling``, or, where a config keeps both in ``rope_parameters`` (transformers 5: its
    ``rope_theta`` and, beside a ``rope_type`` other than "default", the scaling's keys), theirs."""
    params = cfg.raw("rope_parameters")
    if cfg.raw("rope_theta") is None and cfg.raw("rope_scaling") is None and isinstance(params, dict):
        scaled = params.get("rope_type", params.get("type")) not in (None, "default")
        return params.get("rope_theta"), params if scaled else None, "rope_parameters", "rope_parameters"
    return cfg.raw("rope_theta"), cfg.raw("rope_scaling"), "rope_theta", "rope_scaling"


def _rotary_base(cfg: Config) -> Val | None:
    """The attention's ``rotary_base``: the file's rope theta (None where it gives none)."""
    theta, _, field, _ = _rope(cfg)
    if theta is None:
        return None
    if field == "rope_theta":
        return cfg.number("rope_theta", positive=True)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 0 < theta < math.inf:
        raise cfg.fail(field, f"rope_parameters' rope_theta must be a number > 0, got {short(theta)}")
    return Val(float(theta), "rope_parameters' rope_theta", field)


def _rope_notes(cfg: Config, notes: list[str], written: bool = False) -> None:
    """The rotary settings read, noted (no cost); ``written``: the family's attention takes the base
    and Llama 3.1's scaling as its own (written to a framework's launch file)."""
    theta, scaling, theta_field, scaling_field = _rope(cfg)
    if theta is not None:
        where = "" if theta_field == "rope_theta" else f"{theta_field}' "
        notes.append(f"{where}rope_theta={theta}: the rotary frequencies' base"
                      + (", the attention's rotary_base (no weights, no effect on costs; written to a framework's "
                         "launch file)" if written else " (no weights, no effect on costs)"))
    if scaling is not None:
        if not isinstance(scaling, dict):  # transformers' rope_scaling is a mapping ({"rope_type": ..., ...})
            raise cfg.fail(scaling_field, f"must be a mapping such as {{\"rope_type\": \"llama3\", ...}} or null, "
                           f"got {short(scaling)}")
        kind = scaling.get("rope_type", scaling.get("type"))
        into = ("the attention's rope_scaling, written to a framework's launch file; "
                if written and _llama3_scaling(cfg) else "")
        notes.append(f"{scaling_field} ({kind}): rescaled rotary frequencies ({into}no weights, no effect on costs)")


#: Llama 3.1's frequency scaling as Megatron-LM (--use-rope-scaling: RotaryEmbedding._apply_scaling's
#: defaults at d98e8a64) and torchtitan (v0.2.2 RoPEScalingArgs) apply it: only its factor is a flag
LLAMA3_SCALING = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _llama3_scaling(cfg: Config) -> Val | None:
    """The attention's ``rope_scaling`` (its factor) where the file's rope scaling is Llama 3.1's
    ("llama3", its bands as :data:`LLAMA3_SCALING`: what a launch file can state); else None (noted only)."""
    _, scaling, _, field = _rope(cfg)
    if not isinstance(scaling, dict) or scaling.get("rope_type", scaling.get("type")) != "llama3":
        return None
    factor = scaling.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor < math.inf:
        raise cfg.fail(field, f"{field}'s factor must be a number from 1, got {short(factor)}")
    if any(scaling.get(key, value) != value for key, value in LLAMA3_SCALING.items()):
        return None
    return Val(float(factor), f"{field} (llama3): its factor", field)


def gpt2(cfg: Config, seq: int | None) -> Decoder:
    width = cfg.whole("n_embd", aliases=("hidden_size",))
    positions = cfg.whole("n_positions", aliases=("max_position_embeddings",))
    if seq is not None and seq > positions.value:
        raise cfg.fail(positions.field, f"--seq {seq} is longer than {positions.field}={positions.value}, where "
                       "GPT-2's learned positions end", hint=f"give --seq {positions.value} or less")
    if cfg.flag("add_cross_attention", False).value:
        raise cfg.fail("add_cross_attention", "add_cross_attention=true: cross-attention to an encoder is not "
                       "in the op catalogue")
    ffn = cfg.raw("n_inner")
    notes = []
    for field in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if cfg.raw(field) is not None:
            notes.append(f"{field}={cfg.raw(field)}: how the scores are scaled (no effect on sizes or costs)")
    heads = cfg.whole("n_head", aliases=("num_attention_heads",))
    attn_drop = cfg.number("attn_pdrop", 0.1)
    notes.append(f"{attn_drop.origin}={attn_drop.value:g}: attention-probability dropout, inside the attention op")
    return Decoder(
        family="gpt2", width=width, layers=cfg.whole("n_layer", aliases=("num_hidden_layers",)), heads=heads,
        kv_heads=heads, head_dim=_head_dim(cfg, width, heads),
        ffn=cfg.whole("n_inner") if ffn is not None else derived(4 * width.value, "n_inner null: 4 x n_embd"),
        vocab=cfg.whole("vocab_size"), seq=_seq(cfg, seq, "n_positions", aliases=("max_position_embeddings",)),
        norm=Val("layernorm", "GPT-2's LayerNorm"), eps=cfg.number("layer_norm_epsilon", 1e-5, positive=True),
        mlp=_activation(cfg, cfg.text("activation_function", "gelu_new"), gated=False),
        attn_bias=Val(True, "GPT-2's Conv1D projections have biases"), mlp_bias=Val(True, "GPT-2's Conv1D biases"),
        rotary=Val(False, "learned positions"), tied=cfg.flag("tie_word_embeddings", True), positions=positions,
        dropout=cfg.number("resid_pdrop", 0.1), embed_dropout=cfg.number("embd_pdrop", 0.1), notes=tuple(notes))


def _llama_like(cfg: Config, seq: int | None, family: str, *, eps_default: float, max_default: int | None = None,
                tied_default: bool = False, bias_field: str | None = "attention_bias", act: Val | None = None,
                head_dim_default: int | None = None, mlp_bias_field: str | None = None) -> Decoder:
    """Llama's block (RMSNorm, rotary attention, SwiGLU MLP): llama, mistral, qwen2, phi3, mixtral, gemma."""
    notes: list[str] = []
    mlp = _activation(cfg, act or cfg.text("hidden_act", "silu"), gated=True)
    width, heads = cfg.whole("hidden_size"), cfg.whole("num_attention_heads")
    kv = cfg.whole("num_key_value_heads", heads.value)
    kv = kv if cfg.has("num_key_value_heads") else Val(kv.value, "num_key_value_heads absent: as many as the "
                                                        "query heads", "num_key_value_heads")
    if cfg.has("head_dim") or head_dim_default is not None:
        head_dim = cfg.whole("head_dim", head_dim_default)
    else:
        cfg.raw("head_dim")
        head_dim = _head_dim(cfg, width, heads)
    _rotary_whole(cfg, "partial_rotary_factor", notes)
    _rope_notes(cfg, notes, written=True)
    for field in ("attention_dropout", "pretraining_tp"):
        if cfg.raw(field) is not None:
            notes.append(f"{field}={cfg.raw(field)} (no effect on sizes or costs)")
    bias = cfg.flag(bias_field, False) if bias_field else Val(False, f"{family} has no attention biases")
    mlp_bias = cfg.flag(mlp_bias_field, False) if mlp_bias_field else Val(False, f"{family} has no MLP biases")
    return Decoder(
        family=family, width=width, layers=cfg.whole("num_hidden_layers"), heads=heads, kv_heads=kv,
        head_dim=head_dim, ffn=cfg.whole("intermediate_size"), vocab=cfg.whole("vocab_size"),
        seq=_seq(cfg, seq, "max_position_embeddings", max_default), norm=Val("rmsnorm", f"{family}'s RMSNorm"),
        eps=cfg.number("rms_norm_eps", eps_default, positive=True), mlp=mlp,
        attn_bias=bias, mlp_bias=mlp_bias, rotary=Val(True, "rotary positions (RoPE)"),
        tied=cfg.flag("tie_word_embeddings", tied_default), notes=tuple(notes),
        rotary_base=_rotary_base(cfg), rope_scaling=_llama3_scaling(cfg))


def llama(cfg: Config, seq: int | None) -> Decoder:
    return _llama_like(cfg, seq, "llama", eps_default=1e-6, max_default=2048, mlp_bias_field="mlp_bias")


def _window(cfg: Config, default: int | None) -> Val | None:
    """The ``sliding_window`` field: None when it is null (or absent with no default)."""
    if cfg.has("sliding_window") or (default is not None and "sliding_window" not in cfg.data):
        return cfg.whole("sliding_window", default)
    cfg.raw("sliding_window")
    return None


def mistral(cfg: Config, seq: int | None) -> Decoder:
    d = _llama_like(cfg, seq, "mistral", eps_default=1e-6, max_default=4096 * 32, bias_field=None)
    notes = list(d.notes)
    _sliding(cfg, d.seq, _window(cfg, 4096), notes)
    return _replace(d, notes=tuple(notes))


def qwen2(cfg: Config, seq: int | None) -> Decoder:
    d = _llama_like(cfg, seq, "qwen2", eps_default=1e-6, max_default=32768, bias_field=None)
    return _qwen_common(cfg, d)


def _qwen_window(cfg: Config, d: Decoder) -> tuple[str, ...]:
    """Qwen's ``use_sliding_window`` (and its window), as notes on ``d``'s."""
    notes = list(d.notes)
    if cfg.flag("use_sliding_window", False).value:
        _sliding(cfg, d.seq, _window(cfg, 4096), notes)
    else:
        cfg.raw("sliding_window")  # read, and of no effect without use_sliding_window
        cfg.raw("max_window_layers")
        notes.append("use_sliding_window=false: full causal attention in every layer")
    return tuple(notes)


def _qwen_common(cfg: Config, d: Decoder) -> Decoder:
    qkv = Val(True, f"{d.family} has q/k/v projection biases (no config field)", "model_type")
    return _replace(d, qkv_bias=qkv, notes=_qwen_window(cfg, d))


def phi3(cfg: Config, seq: int | None) -> Decoder:
    d = _llama_like(cfg, seq, "phi3", eps_default=1e-5, max_default=4096, bias_field=None)
    notes = list(d.notes)
    _sliding(cfg, d.seq, _window(cfg, None), notes)
    return _replace(d, dropout=cfg.number("resid_pdrop", 0.0), embed_dropout=cfg.number("embd_pdrop", 0.0),
                    notes=tuple(notes))


def _router_notes(cfg: Config, notes: list[str]) -> None:
    for field in ("router_aux_loss_coef", "router_jitter_noise", "output_router_logits", "norm_topk_prob"):
        if cfg.raw(field) is not None:
            notes.append(f"{field}={cfg.raw(field)}: how the router trains or weighs its top k (no effect on "
                         "sizes or costs)")


def mixtral(cfg: Config, seq: int | None) -> Decoder:
    """Mistral's block with the MLP replaced by ``num_local_experts`` SwiGLU experts of
    ``intermediate_size``, ``num_experts_per_tok`` a token (MixtralSparseMoeBlock: a bias-free router)."""
    d = _llama_like(cfg, seq, "mixtral", eps_default=1e-5, max_default=4096 * 32, bias_field=None)
    notes = list(d.notes)
    _sliding(cfg, d.seq, _window(cfg, None), notes)
    _router_notes(cfg, notes)
    experts = Experts(cfg.whole("num_local_experts", 8), cfg.whole("num_experts_per_tok", 2), d.ffn)
    return _replace(d, experts=experts, notes=tuple(notes))


def _sparse_notes(cfg: Config, d: Decoder) -> list[str]:
    """Qwen's mixture-of-experts blocks: every block sparse (``decoder_sparse_step`` 1, no
    ``mlp_only_layers``, else refused), and the notes on ``d``'s for the router's fields and the
    unused dense ``intermediate_size``."""
    step = cfg.whole("decoder_sparse_step", 1)
    dense = cfg.raw("mlp_only_layers") or []
    if step.value != 1 or dense:
        field = "decoder_sparse_step" if step.value != 1 else "mlp_only_layers"
        raise cfg.fail(field, f"{field}={step.value if step.value != 1 else dense}: blocks of two kinds (dense and "
                       "mixture-of-experts) in one stack are not imported yet", hint="every block must be alike")
    notes = list(d.notes)
    _router_notes(cfg, notes)
    notes.append(f"intermediate_size={d.ffn.value}: the dense MLP of mlp_only_layers, of which there are none")
    return notes


def qwen2_moe(cfg: Config, seq: int | None) -> Decoder:
    """Qwen2's block with the MLP replaced by ``num_experts`` SwiGLU experts of ``moe_intermediate_size``
    (``num_experts_per_tok`` a token) and one shared expert of ``shared_expert_intermediate_size`` every
    token goes through, scaled by ``sigmoid(shared_expert_gate x)`` (Qwen2MoeSparseMoeBlock); the
    dense ``intermediate_size`` is only for blocks listed in ``mlp_only_layers``, which are refused."""
    d = _qwen_common(cfg, _llama_like(cfg, seq, "qwen2_moe", eps_default=1e-6, max_default=8192, bias_field=None))
    notes = _sparse_notes(cfg, d)
    experts = Experts(cfg.whole("num_experts", 60), cfg.whole("num_experts_per_tok", 4),
                      cfg.whole("moe_intermediate_size", 1408), cfg.whole("shared_expert_intermediate_size", 5632))
    return _replace(d, experts=experts, notes=tuple(notes))


def qwen3(cfg: Config, seq: int | None) -> Decoder:
    """Qwen2's block without the q/k/v biases (``attention_bias``, false) and with RMSNorm over each
    query and key head before the rotation (Qwen3Attention's ``q_norm`` and ``k_norm``, no config
    field); a head width of its own (``head_dim``, 128 by default)."""
    d = _llama_like(cfg, seq, "qwen3", eps_default=1e-6, max_default=32768, head_dim_default=128)
    return _replace(d, qk_norm=Val(True, f"{d.family} normalises each query and key head (q_norm, k_norm; no config "
                                         "field)", "model_type"), notes=_qwen_window(cfg, d))


def qwen3_moe(cfg: Config, seq: int | None) -> Decoder:
    """Qwen3's block with the MLP replaced by ``num_experts`` SwiGLU experts of ``moe_intermediate_size``
    (``num_experts_per_tok`` a token, no shared expert: Qwen3MoeSparseMoeBlock); the dense
    ``intermediate_size`` is only for blocks listed in ``mlp_only_layers``, which are refused."""
    d = qwen3(cfg, seq)
    notes = _sparse_notes(cfg, d)
    experts = Experts(cfg.whole("num_experts", 128), cfg.whole("num_experts_per_tok", 8),
                      cfg.whole("moe_intermediate_size", 768))
    return _replace(d, family="qwen3_moe", experts=experts, notes=tuple(notes))


def gemma(cfg: Config, seq: int | None) -> Decoder:
    """Gemma's block is Llama's with a gated GELU MLP (refused: the catalogue has no such op), a head
    width of its own (``head_dim``, 256 by default) and a tied head. Its embedding is scaled by
    sqrt(hidden_size) and its RMSNorm weights are offset by one: neither has weights or costs."""
    act = "hidden_activation" if cfg.has("hidden_activation") else "hidden_act"
    d = _llama_like(cfg, seq, "gemma", eps_default=1e-6, max_default=8192, tied_default=True, bias_field=None,
                    act=cfg.text(act, "gelu_pytorch_tanh"), head_dim_default=256)
    return _replace(d, notes=d.notes + ("embedding scaled by sqrt(hidden_size), RMSNorm weights offset by one "
                                        "(no weights, no effect on costs)",))


def gpt_neox(cfg: Config, seq: int | None) -> Decoder:
    notes: list[str] = []
    _rotary_whole(cfg, "rotary_pct", notes)
    if not cfg.has("rotary_pct"):  # GPTNeoXConfig's default is 0.25
        raise cfg.fail("rotary_pct", "rotary_pct absent: GPT-NeoX's default 0.25 rotates a quarter of each head, "
                       "which the op catalogue's rotary cannot", hint="the model cannot be expressed as a network spec today")
    _rope_notes(cfg, notes)
    parallel = cfg.flag("use_parallel_residual", True)
    width, heads = cfg.whole("hidden_size"), cfg.whole("num_attention_heads")
    return Decoder(
        family="gpt_neox", width=width, layers=cfg.whole("num_hidden_layers"), heads=heads, kv_heads=heads,
        head_dim=_head_dim(cfg, width, heads),
        ffn=cfg.whole("intermediate_size"), vocab=cfg.whole("vocab_size"),
        seq=_seq(cfg, seq, "max_position_embeddings", 2048), norm=Val("layernorm", "GPT-NeoX's LayerNorm"),
        eps=cfg.number("layer_norm_eps", 1e-5, positive=True), mlp=_activation(cfg, cfg.text("hidden_act", "gelu"), gated=False),
        attn_bias=cfg.flag("attention_bias", True), mlp_bias=Val(True, "GPT-NeoX's MLP has biases"),
        rotary=Val(True, "rotary positions"), tied=cfg.flag("tie_word_embeddings", False),
        residual=Val("parallel" if parallel.value else "sequential", parallel.origin, parallel.field),
        dropout=cfg.number("hidden_dropout", 0.0), notes=tuple(notes))


def falcon(cfg: Config, seq: int | None) -> Decoder:
    if cfg.flag("alibi", False).value:
        raise cfg.fail("alibi", "alibi=true: ALiBi position biases are not in the op catalogue")
    act = cfg.text("activation", "gelu")
    mlp = _activation(cfg, act, gated=False)
    width, heads = cfg.whole("hidden_size"), cfg.whole("num_attention_heads")
    new = cfg.flag("new_decoder_architecture", False)
    if new.value:
        kv = cfg.whole("num_kv_heads", heads.value)
    elif cfg.flag("multi_query", True).value:
        kv = Val(1, "multi_query=true: one key/value head", "multi_query")
    else:
        kv = heads
    if new.value:  # ln_attn and ln_mlp, or one norm when num_ln_in_parallel_attn is 1
        residual = "parallel_shared" if cfg.raw("num_ln_in_parallel_attn") == 1 else "parallel"
    else:  # input_layernorm shared by both branches, or a post-attention norm
        residual = "parallel_shared" if cfg.flag("parallel_attn", True).value else "sequential"
    notes: list[str] = []
    _rope_notes(cfg, notes)
    bias = cfg.flag("bias", False)
    ffn = cfg.whole("ffn_hidden_size") if cfg.has("ffn_hidden_size") else derived(4 * width.value, "4 x hidden_size")
    return Decoder(
        family="falcon", width=width, layers=cfg.whole("num_hidden_layers"), heads=heads, kv_heads=kv,
        head_dim=_head_dim(cfg, width, heads), ffn=ffn,
        vocab=cfg.whole("vocab_size"), seq=_seq(cfg, seq, "max_position_embeddings", 2048),
        norm=Val("layernorm", "Falcon's LayerNorm"), eps=cfg.number("layer_norm_epsilon", 1e-5, positive=True), mlp=mlp,
        attn_bias=bias, mlp_bias=bias, rotary=Val(True, "rotary positions"), tied=cfg.flag("tie_word_embeddings", True),
        residual=Val(residual, "new_decoder_architecture / parallel_attn", "parallel_attn"),
        dropout=cfg.number("hidden_dropout", 0.0), notes=tuple(notes))


def _replace(d: Decoder, **changes) -> Decoder:
    fields = {k: getattr(d, k) for k in d.__dataclass_fields__}
    fields.update(changes)
    return Decoder(**fields)


FAMILIES: dict[str, Callable[[Config, int | None], Decoder]] = {
    "gpt2": gpt2, "llama": llama, "mistral": mistral, "mixtral": mixtral, "qwen2": qwen2, "qwen2_moe": qwen2_moe,
    "qwen3": qwen3, "qwen3_moe": qwen3_moe,
    "gemma": gemma, "phi3": phi3, "gpt_neox": gpt_neox, "falcon": falcon,
}
