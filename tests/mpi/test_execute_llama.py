"""The Llama-style block in the executor: RMSNorm, SwiGLU, rotary positions and per-head query/key
norms (Qwen3's ``qk_norm``), the ops the zoo's llama3-8b, llama3.1-405b and qwen3 networks use.

- tiny-llama's parameter count by hand (its YAML header derives it);
- the kernels against finite differences, and the rotation by hand (a pair's length kept, position
  0 untouched, position 1 turned by 1 radian in its first pair);
- the attention op with rotary and qk_norm on one rank's shard against finite differences and the
  reference step's own code;
- ``dnnplan execute --check`` under mpiexec on 2 and 4 ranks: data and tensor parallelism, a head
  split above ``kv_heads`` with qk_norm, and a run whose rotation's backward is broken fails the check;
- a Hugging Face Qwen3 config.json imported as it is runs under tensor and context parallelism.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch
from executor.ops import attention
from kernels.activation import swiglu_backward, swiglu_forward
from kernels.norm import rmsnorm_backward, rmsnorm_forward
from kernels.rotary import rotary_backward, rotary_forward
from networks.loader import load_network

from tests.support.kernel_checks import RNG, fd_directional
from tests.support.op_checks import check_op, one_rank_ctx, tiny_llama_variant


def _qwen_like(folder: Path) -> str:
    """tiny-llama with Qwen3's per-head query/key norms."""
    return tiny_llama_variant(folder, "tiny-qwen", "rotary: true}", "rotary: true, qk_norm: true}")


def test_tiny_llama_parameter_count_by_hand():
    d, vocab, ffn, kv = 32, 128, 64, 16  # kv: 2 key/value heads of 8
    attention_ = d * d + 2 * kv * d + d * d
    block_ = d + attention_ + d + d * 2 * ffn + ffn * d
    net = load_network("tiny-llama")
    total = sum(int(np.prod(shape)) for layer in net.layers for _, shape in layer.weights)
    assert total == vocab * d + 2 * block_ + d + vocab * d == 26_784
    assert {layer.op for layer in net.layers} >= {"rmsnorm", "swiglu", "attention"}


def test_rmsnorm_and_swiglu_backward_against_finite_differences():
    rng = RNG(1)
    x, gamma, r = rng.normal(size=(2, 5, 6)), rng.normal(size=6), rng.normal(size=(2, 5, 6))
    _, cache = rmsnorm_forward(x, gamma, 1e-5)
    fd_directional(lambda a, g: float(np.sum(r * rmsnorm_forward(a, g, 1e-5)[0])), [x, gamma],
                   list(rmsnorm_backward(r, cache)))
    # each row's root mean square is gamma's scale after the norm
    y, _ = rmsnorm_forward(x, np.ones(6), 0.0)
    np.testing.assert_allclose(np.sqrt((y * y).mean(axis=-1)), 1.0)
    r2 = rng.normal(size=(2, 5, 3))
    _, cache = swiglu_forward(x)
    fd_directional(lambda a: float(np.sum(r2 * swiglu_forward(a)[0])), [x], [swiglu_backward(r2, cache)])
    # gate j at 2j, up j at 2j + 1: silu(g) * u
    g, u = 1.5, -2.0
    y, _ = swiglu_forward(np.array([[g, u]]))
    assert y[0, 0] == pytest.approx(g / (1 + np.exp(-g)) * u)


def test_the_rotation_by_hand_and_its_backward_against_finite_differences():
    dh = 4
    x = np.zeros((1, 2, 2 * dh))
    x[0, :, 0] = 1.0  # the first feature of each head: the first pair is (x0, x2)
    x[0, :, dh] = 1.0
    y, _ = rotary_forward(x, dh)
    np.testing.assert_allclose(y[0, 0], x[0, 0])  # position 0: angle 0
    # position 1, pair 0 at base^0 = 1 radian: (1, 0) -> (cos 1, sin 1)
    np.testing.assert_allclose(y[0, 1, [0, 2]], [np.cos(1.0), np.sin(1.0)])
    np.testing.assert_allclose(y[0, 1, [dh, dh + 2]], [np.cos(1.0), np.sin(1.0)])
    rng = RNG(2)
    x, r = rng.normal(size=(2, 7, 3 * dh)), rng.normal(size=(2, 7, 3 * dh))
    y, _ = rotary_forward(x, dh)
    pairs = lambda a: np.hypot(a.reshape(2, 7, 3, dh)[..., :dh // 2], a.reshape(2, 7, 3, dh)[..., dh // 2:])
    np.testing.assert_allclose(pairs(y), pairs(x))  # a rotation keeps each pair's length
    fd_directional(lambda a: float(np.sum(r * rotary_forward(a, dh)[0])), [x], [rotary_backward(r, dh)])


@pytest.mark.parametrize("qk_norm", [False, True])
def test_rotary_attention_against_finite_differences_and_the_reference(tmp_path, qk_norm):
    ctx = one_rank_ctx(_qwen_like(tmp_path) if qk_norm else "tiny-llama", "h0.attn")
    assert ("q_norm" in [w for w, _ in ctx.layer.weights]) == qk_norm
    check_op(ctx, attention)


# real ranks: dnnplan predict --out, then dnnplan execute --check

def _plan(folder: Path, net: str, ranks: int, tensor: int = 1) -> str:
    path = folder / f"{Path(net).stem}-{ranks}-t{tensor}.yaml"
    args = ["predict", net, "-p", str(ranks), "-b", "8", "--machine", "dgx-a100", "--out", str(path)]
    args += ["--tensor", str(tensor)] if tensor > 1 else []
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return str(path)


def _execute(plan: str, ranks: int, out: Path, warmup: int = 1):
    return CliRunner().invoke(app, ["execute", plan, "--ranks", str(ranks), "--steps", "1", "--warmup", str(warmup),
                                    "--check", "--json", str(out), "--timeout", "240"])


# (network, ranks, tensor): data parallel, heads split within kv_heads (2) and above it (4: each
# key/value head and its k_norm's gradient on two ranks)
CASES = [("tiny-llama", 2, 1), ("tiny-llama", 2, 2), ("tiny-llama", 4, 4), ("qk_norm", 2, 2), ("qk_norm", 4, 4),
         ("qk_norm", 4, 2)]


@pytest.mark.mpi
@pytest.mark.parametrize("net,ranks,tensor", CASES)
def test_dnnplan_execute_matches_one_process(tmp_path, net, ranks, tensor):
    plan = _plan(tmp_path, _qwen_like(tmp_path) if net == "qk_norm" else net, ranks, tensor)
    out = tmp_path / "run.json"
    result = _execute(plan, ranks, out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"], data["check"]
    assert data["check"]["worst_rel_error"] <= 1e-4
    if tensor > 1:  # the head split all-reduces the attention's output
        measured = {layer["name"]: layer for layer in data["measured"]["layers"]}
        assert measured["h0.attn"]["fwd_comm_s"] > 0


@pytest.mark.mpi
def test_check_catches_a_rotation_left_out_of_the_backward(tmp_path, monkeypatch):
    """The distributed attention's backward without the inverse rotation
    (tests/support/workers/skip_rotary_backward_worker.py): --check fails (exit 3), by far, on the attention."""
    plan = _plan(tmp_path, "tiny-llama", 2, 2)
    monkeypatch.setattr(launch, "WORKER_MODULE", "tests.support.workers.skip_rotary_backward_worker")
    out = tmp_path / "run.json"
    result = _execute(plan, 2, out, warmup=0)
    assert result.exit_code == 3, result.output
    check = json.loads(out.read_text())["check"]
    assert not check["passed"] and check["worst_rel_error"] > 100 * 1e-4, check


QWEN3_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32,
                "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 8, "vocab_size": 128, "max_position_embeddings": 16, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000, "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu"}


@pytest.mark.mpi
def test_an_imported_qwen3_config_runs_under_tensor_and_context_parallelism(tmp_path):
    """A Hugging Face Qwen3 config.json (RMSNorm, GQA with qk_norm and rotary positions, SwiGLU)
    imported as it is, split over heads and sequence on 4 ranks: --check passes."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN3_CONFIG))
    spec = load_network(str(config))
    assert any(layer.p.get("qk_norm") and layer.p.get("rotary") for layer in spec.layers if layer.op == "attention")
    plan = tmp_path / "plan.yaml"
    made = CliRunner().invoke(app, ["predict", str(config), "-p", "4", "-b", "8", "--machine", "dgx-a100", "--tensor",
                                    "2", "--context", "2", "--out", str(plan)])
    assert made.exit_code == 0, made.output
    out = tmp_path / "run.json"
    result = _execute(str(plan), 4, out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]
