"""The Llama-style block (RMSNorm, SwiGLU, rotary positions, Qwen3's per-head query/key norms) run
for real: ``dnnplan execute --check`` under mpiexec on 2 and 4 ranks (data and tensor parallelism,
a head split above ``kv_heads`` with qk_norm), a run whose rotation's backward is broken fails the
check, and a Hugging Face Qwen3 config.json imported as it is runs under tensor and context
parallelism. The ops on one process: tests/unit/executor/ops/test_llama_ops.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.launch import mpiexec as launch
from networks.loader import load_network

from tests.support.executor_plans import predicted_plan
from tests.support.op_checks import qwen_like

# real ranks: dnnplan predict --out, then dnnplan execute --check

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
    plan = predicted_plan(tmp_path, qwen_like(tmp_path) if net == "qk_norm" else net, ranks, tensor)
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
    plan = predicted_plan(tmp_path, "tiny-llama", 2, 2)
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
                                    "2", "--context", "2", "--optimizer", "momentum", "--precision", "fp32", "--out", str(plan)])
    assert made.exit_code == 0, made.output
    out = tmp_path / "run.json"
    result = _execute(str(plan), 4, out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]
