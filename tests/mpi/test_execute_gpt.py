"""`dnnplan execute --check` of a tiny GPT (networks/zoo/gpt-tiny.yaml) under mpiexec on 2 and 4 ranks:
data parallel and Megatron tensor parallel (heads, column/row-parallel linears, vocabulary-parallel
embedding, head and loss), with and without sequence parallelism, and samples x positions (N x H)
around a data-parallel attention. The ops and kernels on one process: tests/unit/executor/ops/test_gpt_ops.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel.frameworks.megatron import megatron_strategies
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from executor.session.step_choice import uniform_plan
from planner.plan.plan_file import write_plan
from profiler import context

GPT = "gpt-tiny"


def _plan(folder, ranks: int, tensor: int, sequence_parallel: bool, batch: int = 8, scatter: bool = False) -> str:
    """Megatron's layout (tensor 1: data parallel); ``tensor`` 0: every layer N=2 x H=ranks/2 (the
    embedding's positions, layer norms, linears, the tied head and the loss split over the
    sequence), attention N=2 (it cannot split the sequence yet)."""
    ctx = context.resolve(GPT, ranks, batch, "dgx-a100")
    if tensor:
        # scatter=False: sequence parallelism as the executor runs it, all-reduce then slice;
        # scatter=True: Megatron's reduce-scatter variant (SP), which the executor runs as that too
        strategies, fallbacks = megatron_strategies(ctx.network, ranks, batch, tensor, sequence_parallel,
                                                    scatter=scatter)
        assert not fallbacks
    else:
        strategies = {layer.name: make_strategy(ranks, {"N": 2} if layer.op == "attention" else
                                                {"N": 2, "H": ranks // 2}) for layer in ctx.network.layers}
    path = folder / f"gpt-tiny-{ranks}-t{tensor}{'-sp' if sequence_parallel else ''}{'-rs' if scatter else ''}.yaml"
    write_plan(uniform_plan(ctx, GPT, "dgx-a100", strategies, "megatron"), str(path))
    return str(path)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,tensor,sequence_parallel", [(2, 1, False), (4, 1, False), (2, 2, False),
                                                            (4, 2, False), (4, 4, True), (4, 0, False)])
def test_dnnplan_execute_matches_one_process(tmp_path, ranks, tensor, sequence_parallel):
    plan = _plan(tmp_path, ranks, tensor, sequence_parallel)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", str(ranks), "--steps", "2", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"], data["check"]
    assert data["check"]["worst_rel_error"] <= 1e-4
    measured = {layer["name"]: layer for layer in data["measured"]["layers"]}
    assert measured["h1.attn"]["fwd_compute_s"] > 0 and measured["lm_head"]["bwd_compute_s"] > 0
    if tensor > 1:  # the head split all-reduces the attention output, the loss its row statistics
        assert measured["h0.attn"]["fwd_comm_s"] > 0 and measured["loss"]["fwd_comm_s"] > 0


@pytest.mark.mpi
def test_a_plan_with_the_sequence_parallel_variant_runs_as_its_plain_split_and_says_so(tmp_path):
    plan = _plan(tmp_path, 2, 2, True, scatter=True)
    assert ",SP" in Path(plan).read_text() or "SP: 1" in Path(plan).read_text()
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", "2", "--steps", "1", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    assert "sequence-parallel variant (SP)" in result.output and "runs each as its plain split" in result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"] and data["check"]["worst_rel_error"] <= 1e-4
    # what it predicts is what it runs: the plain split's prediction, not the reduce-scatter's
    plain, plain_out = _plan(tmp_path, 2, 2, True), tmp_path / "plain.json"
    again = CliRunner().invoke(app, ["execute", plain, "--ranks", "2", "--steps", "1", "--warmup", "1",
                                     "--json", str(plain_out), "--timeout", "240"])
    assert again.exit_code == 0 and "sequence-parallel variant" not in again.output, again.output
    assert data["predicted"]["step_s"] == pytest.approx(json.loads(plain_out.read_text())["predicted"]["step_s"])
