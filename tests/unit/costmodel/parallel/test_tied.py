"""A tied LM head and its embedding's table (costmodel.layer.tied): free where the two share rows, priced
as the table's reshard and the head's gradient sum where they do not, weighed by the planner as an
edge, and run by the executor either way (``--check`` against one process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodel.machine.loading import load_machine
from costmodel.parallel.strategy import make_strategy
from costmodel.layer.tied import head_sum_s, table_layout, tie_estimate, tie_mismatch, ties
from costmodel.parallel.layout import block, same_blocks
from costmodel.parallel.shard import weight_layouts
from dnnplan.cli import app
from executor.session.step_choice import uniform_plan
from networks.loader import load_network
from planner.plan.plan_file import read_plan, write_plan
from profiler import context

GPT = "gpt-tiny"


def _pair(net, p: int, embed: dict, head: dict):
    by = {layer.name: layer for layer in net.layers}
    return by["embed"], make_strategy(p, embed), by["lm_head"], make_strategy(p, head)


@pytest.mark.parametrize("embed,head", [({"N": 4}, {"N": 4}), ({"C": 4}, {"F": 4}), ({"N": 2, "C": 2}, {"N": 2, "F": 2}),
                                        ({"H": 2, "N": 2}, {"N": 2, "H": 2})])
def test_a_head_sharing_the_embeddings_rows_costs_nothing(embed, head):
    e, es, h, hs = _pair(load_network(GPT), 4, embed, head)
    assert tie_mismatch(h, hs, e, es) is None
    edge = tie_estimate(e, es, h, hs, load_machine("dgx-a100"))
    assert edge.fwd_s == edge.bwd_s == 0.0 and edge.fwd_bytes == edge.bwd_bytes == 0


@pytest.mark.parametrize("embed,head", [({"F": 4}, {"N": 4}), ({"N": 4}, {"N": 2, "F": 2}), ({"C": 4}, {"N": 4})])
def test_a_head_needing_other_rows_pays_the_tables_reshard_and_its_gradient_sum(embed, head):
    e, es, h, hs = _pair(load_network(GPT), 4, embed, head)
    machine = load_machine("dgx-a100")
    assert tie_mismatch(h, hs, e, es) is not None
    edge = tie_estimate(e, es, h, hs, machine)
    assert edge.bwd_s >= head_sum_s(h, hs, machine) > 0
    if embed != {"N": 4}:  # a replicated table is sliced where it lies; others move
        assert edge.fwd_bytes > 0 and edge.fwd_s > 0


EMBEDS = [{"N": 8}, {"C": 8}, {"H": 8}, {"N": 2, "C": 4}, {"C": 4, "N": 2}, {"H": 2, "N": 4}, {"N": 4, "H": 2},
          {"N": 2, "H": 2, "C": 2}]
HEADS = [{"N": 8}, {"F": 8}, {"H": 8}, {"N": 2, "F": 4}, {"F": 2, "N": 4}, {"H": 2, "N": 4}, {"N": 4, "H": 2},
         {"N": 2, "H": 2, "F": 2}]


@pytest.mark.parametrize("embed", EMBEDS)
def test_the_blocks_compared_all_at_once_are_the_blocks_compared_rank_by_rank(embed):
    """layout.same_blocks (every rank's interval along each axis at once), as tie_mismatch asks it,
    says what comparing each rank's block says, for every pair of these layouts of gpt-tiny's table on 8 ranks."""
    net = load_network(GPT)
    alike = []
    for head in HEADS:
        e, es, h, hs = _pair(net, 8, embed, head)
        table, needed = weight_layouts(e, es)["tokens"], table_layout(h, hs)
        alike.append(same_blocks(table, needed))
        assert alike[-1] == all(block(table, r) == block(needed, r) for r in range(8))
    assert any(alike) and not all(alike)


def test_the_planner_weighs_the_tie_and_predicts_what_it_chose():
    """gpt2 on 16 GPUs: with the table's reshard and gradient sum priced, the planner keeps the
    head on the embedding's rows (before, it split the table over features and the head over
    samples, an unpriced gather of the table every step)."""
    got = CliRunner().invoke(app, ["plan", "gpt2", "-p", "16", "-b", "64", "--machine", "dgx-a100", "--precision",
                                   "fp16", "--optimizer", "adam", "--json"])
    assert got.exit_code == 0, got.output
    layers = {lp["name"]: lp["strategy"] for lp in json.loads(got.stdout)["layers"]}
    net = load_network("gpt2")
    e, es, h, hs = _pair(net, 16, layers["embed"], layers["lm_head"])
    assert ties(net) == [("embed", "lm_head")]
    assert tie_mismatch(h, hs, e, es) is None


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,embed,head", [(2, {"F": 2}, {"N": 2}), (4, {"N": 2, "F": 2}, {"N": 4}),
                                              (4, {"N": 4}, {"N": 2, "F": 2}), (4, {"C": 4}, {"N": 2, "F": 2})])
def test_the_executor_reshards_the_table_for_a_head_on_other_rows(tmp_path: Path, ranks, embed, head):
    ctx = context.resolve(GPT, ranks, 8, "dgx-a100")
    strategies = {layer.name: make_strategy(ranks, {"N": ranks}) for layer in ctx.network.layers}
    strategies["embed"], strategies["lm_head"] = make_strategy(ranks, embed), make_strategy(ranks, head)
    path, out = tmp_path / "tie.yaml", tmp_path / "run.json"
    write_plan(uniform_plan(ctx, GPT, "dgx-a100", strategies, "tie"), str(path))
    read_plan(str(path))
    result = CliRunner().invoke(app, ["execute", str(path), "--ranks", str(ranks), "--steps", "1", "--warmup", "0",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"] and data["check"]["worst_rel_error"] <= 1e-4, data["check"]
    head_row = next(lt for lt in data["measured"]["layers"] if lt["name"] == "lm_head")
    assert head_row["bwd_comm_s"] > 0  # the gradient sum and its reshard ran
