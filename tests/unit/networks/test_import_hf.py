"""Hugging Face configs imported as network specs (networks/importers/hf_*.py).

The fixtures under tests/assets/hf/ are the config.json files of released checkpoints, written from
their published fields (tests/assets/hf/SOURCES.md names each one's repository and published
parameter count). Each imported spec must hold exactly the checkpoint's parameters; where the op
catalogue still lacks what a model needs (grouped-query attention's kv_heads, q/k/v biases apart
from the output's, the moe op), the import must refuse naming the config field, and the count is
asserted the moment the catalogue has it.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from networks.analysis import summarize
from networks.errors import DnnplanError
from networks.importers.hf.importer import import_config
from networks.loader import load_network
from networks.ops.catalogue import OPS

from tests.support.paths import ASSETS

HF = ASSETS / "hf"


def _missing(needs: tuple[str, ...]) -> str | None:
    """The first of ``needs`` ('kv_heads', 'head_dim', 'qkv_bias', 'qk_norm', 'moe') the catalogue lacks."""
    for need in needs:
        have = need in OPS if need == "moe" else OPS["attention"].param(need) is not None
        if not have:
            return need
    return None


#: fields a refusal may name for each missing catalogue feature
FIELD = {"kv_heads": ("num_key_value_heads",), "qkv_bias": ("model_type",), "qk_norm": ("model_type",),
         "head_dim": ("head_dim",),
         "moe": ("num_local_experts", "num_experts")}

# (folder, --seq, the catalogue features it needs, published parameters: tests/assets/hf/SOURCES.md)
CHECKPOINTS = [
    # V D + P D + L (12 D^2 + 13 D) + 2 D, V=50257, P=1024, D=768, L=12: tied head, learned positions
    ("gpt2", None, (), 124_439_808),
    # the same with D=1600, L=48
    ("gpt2-xl", None, (), 1_557_611_200),
    # 2 V D + L (4 D^2 + 3 D F + 2 D) + D, V=32000, D=4096, F=11008, L=32 (the zoo's llama2-7b)
    ("Llama-2-7b-hf", None, (), 6_738_415_616),
    # 2 V D + L (2 D^2 + 2 D (D/4) + 3 D F + 2 D) + D, V=128256, D=4096, F=14336, L=32, 8 kv heads of 128
    ("Meta-Llama-3-8B", None, ("kv_heads",), 8_030_261_248),
    # the same with D=8192, F=28672, L=80, 64 heads, 8 kv heads of 128 (kv width D/8)
    ("Meta-Llama-3-70B", None, ("kv_heads",), 70_553_706_496),
    # Llama-3-8B's block with V=32000, F=14336: 2 V D + 32 (41,943,040 + 176,160,768 + 8,192) + D; its
    # sliding window of 4096 is the whole sequence at --seq 4096
    ("Mistral-7B-v0.1", 4096, ("kv_heads",), 7_241_732_096),
    # Mistral's attention, 8 experts of 3 D F each and a router of 8 D a block:
    # 2 V D + 32 (41,943,040 + 8 x 176,160,768 + 32,768 + 8,192) + D
    ("Mixtral-8x7B-v0.1", 4096, ("kv_heads", "moe"), 46_702_792_704),
    # D=3584, 28 heads, 4 kv heads of 128, F=18944, V=152064, L=28, q/k/v biases without the output's:
    # 2 V D + 28 (2 D^2 + 2 D 512 + D + 2 x 512 + 3 D F + 2 D) + D
    ("Qwen2-7B", 4096, ("kv_heads", "qkv_bias"), 7_615_616_512),
    # D=2048, 16 heads of 128 with q/k/v biases, L=24, V=152064 untied; 60 experts of 3 D 1408, a router of 60 D,
    # one shared expert of 3 D 5632 and its gate of D: 2 V D + 24 (4 D^2 + 3 D + 60 D + 60 x 3 D 1408 + 3 D 5632
    # + D + 2 D) + D
    ("Qwen1.5-MoE-A2.7B", 4096, ("qkv_bias", "moe"), 14_315_784_192),
    # D=2048, 32 heads and 4 kv heads of 128 (Dq=4096, Dkv=512), per-head q/k norms of 128 each, L=48,
    # V=151936 untied; 128 experts of 3 D 768 and a router of 128 D:
    # 2 V D + 48 (2 D Dq + 2 D Dkv + 2 x 128 + 128 D + 128 x 3 D 768 + 2 D) + D
    ("Qwen3-30B-A3B", 4096, ("kv_heads", "head_dim", "qk_norm", "moe"), 30_532_122_624),
]


@pytest.mark.parametrize("folder,seq,needs,params", CHECKPOINTS, ids=[c[0] for c in CHECKPOINTS])
def test_each_checkpoint_has_its_published_parameter_count(folder, seq, needs, params):
    missing = _missing(needs)
    if missing is None:
        assert load_network(str(HF / folder), seq=seq).num_params == params
        return
    with pytest.raises(DnnplanError) as err:
        load_network(str(HF / folder), seq=seq)
    assert err.value.field in FIELD[missing], str(err.value)
    assert missing in str(err.value) and "config.json" in str(err.value)


def test_imported_gpt2_is_the_zoos_gpt2():
    ours, zoo = load_network(str(HF / "gpt2")), load_network("gpt2")
    assert [(l.op, l.in_shapes, l.out_shape, l.weights and [s for _, s in l.weights]) for l in ours.layers] == \
           [(l.op, l.in_shapes, l.out_shape, l.weights and [s for _, s in l.weights]) for l in zoo.layers]
    assert summarize(ours, 1).macs_per_sample == summarize(zoo, 1).macs_per_sample


def test_imported_llama2_is_the_zoos_llama2():
    ours, zoo = load_network(str(HF / "Llama-2-7b-hf")), load_network("llama2-7b")
    assert [(l.op, l.out_shape, l.p) for l in ours.layers] == [(l.op, l.out_shape, l.p) for l in zoo.layers]


def _predicted(network: str, *flags: str) -> dict:
    got = CliRunner().invoke(app, ["predict", network, "--machine", "dgx-h100", "--precision", "bf16", "--optimizer",
                                   "adam", *flags, "--json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def _same_model(ours, zoo) -> None:
    """The same layers (op, shapes, weights), parameters and work a sample."""
    assert [(l.op, l.in_shapes, l.out_shape, [s for _, s in l.weights]) for l in ours.layers] == \
           [(l.op, l.in_shapes, l.out_shape, [s for _, s in l.weights]) for l in zoo.layers]
    a, b = summarize(ours, 1), summarize(zoo, 1)
    assert (a.params, a.macs_per_sample, a.flops_fwd, a.flops_bwd, a.activation_bytes) == \
           (b.params, b.macs_per_sample, b.flops_fwd, b.flops_bwd, b.activation_bytes)


@pytest.mark.parametrize("folder,zoo,seq,flags", [
    ("Meta-Llama-3-8B", "llama3-8b", None, ("-p", "64", "-b", "64", "--tensor", "2")),
    ("Mixtral-8x7B-v0.1", "mixtral-8x7b", 4096, ("-p", "64", "-b", "64", "--expert", "8")),
])
def test_imported_checkpoint_is_the_zoos_model_with_the_same_predicted_step(folder, zoo, seq, flags):
    ours = load_network(str(HF / folder), seq=seq)
    _same_model(ours, load_network(zoo))
    seq_flag = ("--seq", str(seq)) if seq else ()
    a, b = _predicted(str(HF / folder), *seq_flag, *flags), _predicted(zoo, *flags)
    assert a["step_s"] > 0 and [a[k] for k in ("step_s", "fwd_s", "bwd_s", "grad_sync_s", "memory_peak_bytes")] == \
           [b[k] for k in ("step_s", "fwd_s", "bwd_s", "grad_sync_s", "memory_peak_bytes")]


def test_qwen2_moe_has_its_shared_expert_and_gate():
    moe = load_network(str(HF / "Qwen1.5-MoE-A2.7B"), seq=4096).layer("layers0.moe")
    assert (moe.p["experts"], moe.p["top_k"], moe.p["hidden"]) == (60, 4, 1408)
    w = dict(moe.weights)
    assert w["router"] == (60, 2048) and w["w_in"] == (60, 2 * 1408, 2048) and w["w_out"] == (60, 2048, 1408)
    assert w["shared_in"] == (2 * 5632, 2048) and w["shared_out"] == (2048, 5632) and w["shared_gate"] == (1, 2048)


def test_qwen3_moe_normalises_each_query_and_key_head_and_is_the_zoos_model():
    ours = load_network(str(HF / "Qwen3-30B-A3B"), seq=4096)
    attn = ours.layer("layers0.attn")
    assert attn.p["qk_norm"] and (attn.p["heads"], attn.p["kv_heads"], attn.p["head_dim"]) == (32, 4, 128)
    w = dict(attn.weights)
    assert w["q_norm"] == (128,) and w["k_norm"] == (128,) and w["q_weight"] == (4096, 2048)
    moe = ours.layer("layers0.moe")
    assert (moe.p["experts"], moe.p["top_k"], moe.p["hidden"]) == (128, 8, 768) and "shared_in" not in dict(moe.weights)
    _same_model(ours, load_network("qwen3-30b-a3b"))


def test_the_sequence_is_the_configs_longest_unless_given():
    assert load_network(str(HF / "gpt2")).inputs[0].shape == (1024,)
    assert load_network(str(HF / "Llama-2-7b-hf"), seq=256).inputs[0].shape == (256,)
    with pytest.raises(DnnplanError) as err:
        load_network(str(HF / "gpt2"), seq=2048)
    assert err.value.field == "n_positions" and "--seq 2048 is longer than n_positions=1024" in str(err.value)


def test_every_number_of_the_spec_says_where_it_came_from():
    text = import_config((HF / "Llama-2-7b-hf" / "config.json").read_text(), "config.json", 512, "llama")
    for line in text.splitlines():
        if line.lstrip().startswith("- {"):
            body, _, note = line.partition("  # ")
            for key in ("features", "heads", "vocab", "dim", "eps", "repeat"):
                if f" {key}: " in body:
                    assert f"{key} <-" in note or f", {key}" in note, line
    assert "sequence <- --seq" in text


def _config(tmp_path, **fields) -> str:
    base = json.loads((HF / "Llama-2-7b-hf" / "config.json").read_text())
    base.update(fields)
    base = {k: v for k, v in base.items() if v != "DROP"}
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(base))
    return str(path)


@pytest.mark.parametrize("fields,field,words", [
    ({"hidden_size": "DROP"}, "hidden_size", "has no 'hidden_size'"),
    ({"hidden_size": None}, "hidden_size", "'hidden_size' is null, and a llama model needs it"),
    ({"rope_scaling": "yes"}, "rope_scaling", "must be a mapping"),
    ({"num_hidden_layers": 0}, "num_hidden_layers", "whole number"),
    ({"num_hidden_layers": 10 ** 9}, "num_hidden_layers", "each decoder layer is 9 entries of the spec (8 layers and "
     "the block), past the 20,000 entries a network spec holds (at most 2,222 decoder layers)"),
    ({"model_type": "bert"}, "model_type", "not a family dnnplan imports"),
    ({"architectures": ["LlamaForSequenceClassification"]}, "architectures", "only the causal language model"),
    ({"hidden_act": "gelu"}, "hidden_act", "gated gelu MLP is not in the op catalogue"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor", "part of each head"),
    ({"num_attention_heads": 30, "num_key_value_heads": "DROP"}, "num_attention_heads", "must divide hidden_size"),
    ({"model_type": "mistral", "sliding_window": 1024}, "sliding_window", "sliding_window=1024 is shorter than the "
     "sequence 4096"),
    ({"model_type": "mistral", "sliding_window": "DROP", "max_position_embeddings": 32768}, "sliding_window",
     "sliding_window=4096 (mistral's default: the file sets none) is shorter than the sequence 32768"),
    ({"model_type": "gpt_neox", "rotary_pct": 0.25}, "rotary_pct", "part of each head"),
    ({"model_type": "falcon", "alibi": True}, "alibi", "ALiBi"),
    ({"model_type": "falcon"}, "activation", "activation=gelu (falcon's default: the file sets none)"),
    ({"model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"}, "hidden_act", "gated gelu_pytorch_tanh MLP"),
    ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 6}, "num_experts_per_tok",
     "num_experts_per_tok=6 exceeds num_local_experts=4"),
    ({"model_type": "qwen2_moe", "decoder_sparse_step": 2}, "decoder_sparse_step", "blocks of two kinds"),
    ({"model_type": "qwen2_moe", "mlp_only_layers": [0]}, "mlp_only_layers", "blocks of two kinds"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 0.5}}, "rope_scaling", "factor must be a number from 1"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": float("nan")}}, "rope_scaling",
     "factor must be a number from 1"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": float("inf")}}, "rope_scaling",
     "factor must be a number from 1"),
    ({"rope_theta": "DROP", "rope_parameters": {"rope_type": "default", "rope_theta": -1}}, "rope_parameters",
     "rope_theta must be a number > 0"),
    ({"rms_norm_eps": 0}, "rms_norm_eps", "must be a number > 0, got 0"),  # not the spec's line the import makes
    ({"model_type": "gpt2", "layer_norm_epsilon": 0.0}, "layer_norm_epsilon", "must be a number > 0"),
])
def test_what_the_catalogue_cannot_express_is_refused_naming_the_field(tmp_path, fields, field, words):
    with pytest.raises(DnnplanError) as err:
        load_network(_config(tmp_path, **fields))
    msg = str(err.value)
    assert err.value.field == field and words in msg and "\n" not in msg, msg


LLAMA31_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def _scalings(path: str) -> set:
    return {layer.p.get("rope_scaling") for layer in load_network(path).layers if layer.op == "attention"}


def test_llama_31s_rope_scaling_is_the_attentions_and_other_scalings_are_noted_only(tmp_path):
    """Llama 3.1's config.json rope_scaling (rope_type llama3, factor 8 over bands 1 and 4 of 8,192
    positions; Llama 3.2's factor 32) is the attention's rope_scaling, which Megatron-LM's
    --use-rope-scaling and torchtitan's RoPEScalingArgs state; other bands or kinds, which their flags
    cannot state, are noted in the spec and set nothing."""
    assert _scalings(_config(tmp_path, rope_scaling=LLAMA31_SCALING)) == {8.0}
    assert _scalings(_config(tmp_path, rope_scaling={**LLAMA31_SCALING, "factor": 32.0})) == {32.0}
    assert _scalings(_config(tmp_path, rope_scaling={**LLAMA31_SCALING, "high_freq_factor": 2.0})) == {None}
    assert _scalings(_config(tmp_path, rope_scaling={"type": "linear", "factor": 2.0})) == {None}
    assert _scalings(_config(tmp_path)) == {None}
    text = import_config(json.dumps({**json.loads((HF / "Llama-2-7b-hf" / "config.json").read_text()),
                                     "rope_scaling": LLAMA31_SCALING}), "config.json")
    assert "rope_scaling: 8.0" in text and "the attention's rope_scaling, written to a framework's launch file" in text
    # transformers 5 keeps both in rope_parameters
    v5 = _config(tmp_path, rope_theta="DROP", rope_parameters={**LLAMA31_SCALING, "rope_theta": 500000.0})
    assert _scalings(v5) == {8.0}
    assert {layer.p.get("rotary_base") for layer in load_network(v5).layers if layer.op == "attention"} == {500000.0}
    # a family whose attention takes neither (GPT-NeoX) notes the scaling and does not say it is written
    neox = import_config(json.dumps({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
                                     "rotary_pct": 1.0, "hidden_size": 64, "num_attention_heads": 4,
                                     "num_hidden_layers": 2, "intermediate_size": 256, "vocab_size": 100, "max_position_embeddings": 64,
                                     "hidden_act": "gelu_new", "rope_scaling": LLAMA31_SCALING}), "config.json")
    assert "rope_scaling (llama3): rescaled rotary frequencies (no weights" in neox and "rope_scaling:" not in neox


def test_gpt_neox_with_whole_rotary_and_a_tanh_gelu_has_a_parallel_residual(tmp_path):
    path = _config(tmp_path, model_type="gpt_neox", rotary_pct=1.0, hidden_act="gelu_new", max_position_embeddings=64,
                   architectures=["GPTNeoXForCausalLM"], num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   intermediate_size=256, vocab_size=100)
    net = load_network(path)
    adds = [l for l in net.layers if l.op == "add"]
    assert [len(a.inputs) for a in adds] == [3, 3]
    # 2 V D + L (4 D^2 + 4 D + 2 x 2 D + 2 D F + F + D) + 2 D: untied head, biases everywhere
    d, f, v = 64, 256, 100
    assert net.num_params == 2 * v * d + 2 * (4 * d * d + 4 * d + 4 * d + 2 * d * f + f + d) + 2 * d


def test_malformed_json_names_its_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n "model_type": "llama",\n "hidden_size": 4096,,\n}')
    with pytest.raises(DnnplanError) as err:
        load_network(str(path))
    assert f"{path}:3" in str(err.value) and "not valid JSON" in str(err.value)


def test_an_empty_config_is_said_to_be_empty(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("\n")
    with pytest.raises(DnnplanError) as err:
        load_network(str(path))
    assert "the file is empty" in str(err.value)


def test_a_folder_without_a_config_is_refused(tmp_path):
    with pytest.raises(DnnplanError) as err:
        load_network(str(tmp_path))
    assert "holds no config.json" in str(err.value)
    (tmp_path / "model.onnx").write_bytes(b"")  # a folder of an ONNX model: the file to give is named
    with pytest.raises(DnnplanError) as err:
        load_network(str(tmp_path))
    assert f"give the ONNX model itself: {tmp_path / 'model.onnx'}" in str(err.value)


def test_a_json_network_spec_is_still_a_spec(tmp_path):
    spec = {"name": "tiny", "inputs": {"x": {"shape": [4]}},
            "layers": [{"name": "fc", "op": "linear", "features": 2}, {"name": "loss", "op": "softmax_cross_entropy"}]}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(spec))
    assert load_network(str(path)).num_params == 10
