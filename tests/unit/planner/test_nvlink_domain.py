"""Tensor groups wider than a node inside an NVLink domain (costmodel.machine.model ``domain_size``):
llama3-70b on 64 GB200 NVL72 GPUs (trays of 4, one domain of 72) against DGX B200 nodes of 8 and
against the same GB200 trays without their domain. The planner's candidates are not cut at the node,
so a tensor group of 16 is weighed, and on NVL72 it is priced on NVLink."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml
from typer.testing import CliRunner

from costmodel.comm.groups import collective_s
from costmodel.layer.candidates import candidate_strategies
from costmodel.layer.comms import group_time
from costmodel.machine.loading import load_machine
from costmodel.parallel.axes import F
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.loader import load_network

runner = CliRunner()
NVL72 = load_machine("gb200-nvl72")
B200 = load_machine("dgx-b200")


def _trays_only(tmp_path) -> str:
    """gb200-nvl72 with no NVLink domain: its trays of 4 joined by InfiniBand alone."""
    data = yaml.safe_load(resources.files("costmodel.machine").joinpath("gb200-nvl72.yaml").read_text())
    del data["devices_per_nvlink_domain"]
    data["name"] = "gb200-trays"
    path = tmp_path / "gb200-trays.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_tensor_group_of_16_is_weighed_and_priced_on_nvlink_inside_the_domain():
    net = load_network("llama3-70b")
    gate_up = next(layer for layer in net.layers if layer.name.endswith("gate_up"))
    assert any(s.degree(F) == 16 for s in candidate_strategies(gate_up, 64, 512))  # not cut at the node
    tp16 = make_strategy(64, {F: 16, "N": 4})
    nbytes = 2 ** 28
    on_nvl72 = group_time("allreduce", nbytes, tp16, (F,), NVL72)
    assert on_nvl72 == pytest.approx(collective_s("allreduce", nbytes, 16, 1, NVL72))  # one level: NVLink
    on_b200 = group_time("allreduce", nbytes, tp16, (F,), B200)  # two nodes of 8: InfiniBand between
    assert on_b200 == pytest.approx(collective_s("allreduce", nbytes, 8, 2, B200))
    assert on_b200 > 1.5 * on_nvl72


def test_llama3_70b_with_tensor_16_on_64_gpus_is_faster_inside_the_domain(tmp_path):
    layout = ["predict", "llama3-70b", "-p", "64", "-b", "512", "--tensor", "16", "--pipeline", "4",
              "--micro-batches", "32", "--precision", "bf16", "--optimizer", "adam", "--json"]
    nvl72 = _json(layout + ["-m", "gb200-nvl72"])["step_s"]
    trays = _json(layout + ["-m", _trays_only(tmp_path)])["step_s"]
    b200 = _json(layout + ["-m", "dgx-b200"])["step_s"]
    assert nvl72 < 0.9 * trays  # the same GPUs: only the domain differs
    assert nvl72 < b200 * 2250 / 2500  # more than the BF16 peaks' ratio (2.25 vs 2.5 PFLOP/s dense)


@pytest.mark.slow
def test_the_planner_uses_the_domain_for_llama3_70b_on_64_gpus(tmp_path):
    plan = ["plan", "llama3-70b", "-p", "64", "-b", "512", "--precision", "bf16", "--json", "--time-limit", "60"]
    nvl72 = _json(plan + ["-m", "gb200-nvl72"])
    trays = _json(plan + ["-m", _trays_only(tmp_path)])
    assert nvl72["step_s"] < trays["step_s"]
    # all 64 GPUs in one domain: the planner's groups talk on NVLink, so its exposed communication is
    # a small share of the step
    assert nvl72["step_comm_s"]["exposed"] < 0.01 * nvl72["step_s"]


def _domain_of(tmp_path, devices: int) -> str:
    """gb200-nvl72 with NVLink domains of ``devices`` GPUs (a rack run as Slurm segments of 16 trays)."""
    data = yaml.safe_load(resources.files("costmodel.machine").joinpath("gb200-nvl72.yaml").read_text())
    data["devices_per_nvlink_domain"] = devices
    data["name"] = f"gb200-nvl{devices}"
    path = tmp_path / f"gb200-nvl{devices}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_later_pipeline_stage_across_two_racks_sets_every_stage_s_pace(tmp_path):
    """llama3-70b on 256 GB200s, 8 stages of 32 with tensor groups of 16: on 72-GPU racks stage 2
    (ranks 64-95) holds a tensor group across racks 0 and 1, and the pipeline waits for it; on racks
    of 64 every stage's groups stay inside one. Stage 0 alone lies the same in both."""
    layout = ["predict", "llama3-70b", "-p", "256", "-b", "512", "--tensor", "16", "--pipeline", "8",
              "--micro-batches", "64", "--precision", "bf16", "--optimizer", "adam", "--json"]
    nvl72 = runner.invoke(app, layout + ["-m", "gb200-nvl72"])
    assert nvl72.exit_code == 0, nvl72.output
    assert "tensor groups of 16 ranks do not divide gb200-nvl72's 72-device link domain" in nvl72.stderr
    racks_of_64 = _json(layout + ["-m", _domain_of(tmp_path, 64)])
    assert json.loads(nvl72.stdout)["step_s"] > 1.1 * racks_of_64["step_s"]


def test_the_planner_prices_a_stage_as_the_pipeline_runs_it(tmp_path):
    """Three stages of 32 on one and a half NVL72 racks: the plan's step is its plan file's, as
    `dnnplan predict` prices it (every stage on the slowest group of every stage)."""
    out = tmp_path / "plan.yaml"
    planned = _json(["plan", "llama3-8b", "-p", "96", "-b", "96", "-m", "gb200-nvl72", "--precision", "bf16",
                     "--pipeline", "3", "--json", "--out", str(out)])
    assert planned["pipeline"]["stages"] == 3
    assert _json(["predict", str(out), "--json"])["step_s"] == planned["step_s"]


def test_a_stage_s_sends_are_priced_on_its_slowest_pair():
    """Stage 1 of 8 stages of 32 on 72-GPU racks (ranks 32-63) sends to ranks 64-95: ranks 40-63 send
    to rack 1, over InfiniBand, though ranks 32 and 64 share rack 0. On DGX H100 nodes, stages of 6
    (tensor 2 over 48 GPUs) send across a node's edge from the first stage on."""
    from costmodel.step.pipeline import p2p_s  # noqa: PLC0415

    nbytes = 2 ** 24
    over_ib = p2p_s(NVL72, 32, 64, nbytes, 32)
    assert over_ib == pytest.approx(NVL72.inter.alpha_s + nbytes * NVL72.inter.beta_s_per_byte)
    assert p2p_s(NVL72, 32, 64, nbytes) < over_ib  # the first pair alone: inside rack 0
    assert p2p_s(NVL72, 0, 32, nbytes, 32) < over_ib  # stage 0 to 1: all inside rack 0
    h100 = load_machine("dgx-h100")
    assert not h100.pairs_same_domain(0, 6, 6) and h100.pairs_same_domain(0, 4, 4)


def test_crossing_more_racks_is_never_priced_faster(tmp_path):
    """llama3.1-405b on 256 GB200s, tensor 8 over 8 stages of 32: 72-GPU racks put more stages'
    sends and data-parallel groups across racks than racks of 64 do, so the step is no faster."""
    layout = ["predict", "llama3.1-405b", "-p", "256", "-b", "2048", "--tensor", "8", "--pipeline", "8",
              "--micro-batches", "256", "--precision", "bf16", "--optimizer", "adam", "--json"]
    assert _json(layout + ["-m", "gb200-nvl72"])["step_s"] >= _json(layout + ["-m", _domain_of(tmp_path, 64)])["step_s"]


def test_a_tensor_group_of_a_whole_stage_across_two_racks_is_warned_of():
    """16 stages of 16 with tensor groups of 16: each group is its stage, and stage 4 (ranks 64-79)
    crosses racks 0 and 1: the warning says so, as for groups smaller than a stage."""
    got = runner.invoke(app, ["predict", "llama3.1-405b", "-p", "256", "-b", "2048", "--tensor", "16", "--pipeline",
                              "16", "--micro-batches", "256", "--precision", "bf16", "-m", "gb200-nvl72"])
    assert got.exit_code == 0, got.output
    assert "tensor groups of 16 ranks do not divide gb200-nvl72's 72-device link domain" in got.stderr
