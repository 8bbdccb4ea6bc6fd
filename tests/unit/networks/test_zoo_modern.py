"""The zoo's current transformers: Llama 3 8B and 70B, Llama 3.1 405B (grouped-query attention),
Mixtral 8x7B and Qwen3-30B-A3B (mixtures of experts), each counted by hand from its released
checkpoint's config.json (HuggingFace: meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B,
meta-llama/Llama-3.1-405B, mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B) to the parameter total
the checkpoint's safetensors hold, and planned on the GPU machine such runs use."""

from __future__ import annotations

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.choices.precision import with_precision
from networks.analysis import summarize
from networks.loader import load_network
from planner.problem.solve import Settings, make_plan

#: name: (hidden D, layers L, query heads, key/value heads, intermediate F, vocabulary V, sequence S,
#: experts, experts a token, released total)
CONFIGS = {
    "llama3-8b": (4096, 32, 32, 8, 14336, 128256, 8192, 0, 0, 8_030_261_248),
    "llama3-70b": (8192, 80, 64, 8, 28672, 128256, 8192, 0, 0, 70_553_706_496),
    "llama3.1-405b": (16384, 126, 128, 8, 53248, 128256, 8192, 0, 0, 405_853_388_800),
    "mixtral-8x7b": (4096, 32, 32, 8, 14336, 32000, 4096, 8, 2, 46_702_792_704),
    "qwen3-30b-a3b": (2048, 48, 32, 4, 768, 151936, 4096, 128, 8, 30_532_122_624),
}
#: a head width other than D / heads, and per-head query/key norms (dh weights each a layer): Qwen3
HEAD_DIM = {"qwen3-30b-a3b": 128}
QK_NORM = {"qwen3-30b-a3b"}


def _by_hand(name: str) -> tuple[int, int]:
    """(parameters, MACs per sequence): embedding, per block q, k, v, o (grouped: Dkv = kv x D / heads),
    two RMSNorm weights and the MLP (SwiGLU: gate, up, down) or the router and the experts' MLPs;
    the final RMSNorm; the untied head. MACs: the projections, 2 S^2 D of the scores and weighted
    sum, the MLP (each token through k experts and the router's S D E, the combine S k D)."""
    d, layers, heads, kv, f, v, s, experts, k, _ = CONFIGS[name]
    dh = HEAD_DIM.get(name, d // heads)
    dq, dkv = heads * dh, kv * dh
    attn = d * (2 * dq + 2 * dkv) + (2 * dh if name in QK_NORM else 0)
    mlp = experts * d + experts * 3 * d * f if experts else 3 * d * f
    params = v * d + layers * (attn + mlp + 2 * d) + d + v * d
    mlp_macs = s * d * experts + k * s * 3 * d * f + k * s * d if experts else s * 3 * d * f
    macs = layers * (s * d * (2 * dq + 2 * dkv) + 2 * s * s * dq + mlp_macs) + s * d * v
    return params, macs


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameters_and_macs_by_hand_from_the_released_config(name):
    params, macs = _by_hand(name)
    assert params == CONFIGS[name][-1]
    net = load_network(name)
    assert net.num_params == params
    assert summarize(net, 1).macs_per_sample == macs


def test_grouped_query_attention_and_experts_in_every_block():
    llama = load_network("llama3-8b")
    attn = [layer for layer in llama.layers if layer.op == "attention"]
    assert len(attn) == 32 and all(a.p["kv_heads"] == 8 and a.p["heads"] == 32 for a in attn)
    assert dict(attn[0].weights) == {"q_weight": (4096, 4096), "kv_weight": (2, 1024, 4096),
                                     "out_weight": (4096, 4096)}
    mixtral = load_network("mixtral-8x7b")
    moe = [layer for layer in mixtral.layers if layer.op == "moe"]
    assert len(moe) == 32 and dict(moe[0].weights) == {"router": (8, 4096), "w_in": (8, 2 * 14336, 4096),
                                                       "w_out": (8, 4096, 14336)}


@pytest.mark.parametrize("name, devices, batch", [("llama3-8b", 8, 8), ("llama3-70b", 64, 64),
                                                  ("llama3.1-405b", 64, 64), ("mixtral-8x7b", 16, 16),
                                                  ("qwen3-30b-a3b", 16, 16)])
def test_every_current_transformer_plans_on_h100s(name, devices, batch):
    """Planned per layer without a pipeline and without a memory bound (the larger ones fit 80 GB only
    in pipeline stages, which ``--pipeline auto`` searches)."""
    machine = load_machine("dgx-h100")
    net = with_precision(load_network(name), "bf16")
    plan = make_plan(net, name, batch, devices, machine, Roofline(machine), memory_limit_bytes=2.0 ** 60,
                     settings=Settings(choices=TrainingChoices(precision="bf16", optimizer="adam")),
                     with_baselines=False)
    assert plan.step_s > 0 and len(plan.layers) == len(net.layers)
    assert {lp.algorithm for lp in plan.layers if lp.name.endswith(".attn")} <= {"flash", "flash+recompute"}
