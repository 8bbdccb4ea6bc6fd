"""Export, then import, predicts the same step and memory as the plan (planner.export, then
planner.launch_import and executor.session.predict_launch): every zoo transformer at 8, 64, 512 and
4096 devices of dgx-h100 in bf16, in the layout each framework runs (torchtitan: FSDP with tensor,
pipeline and expert degrees growing with the devices; DeepSpeed: ZeRO-3 data parallelism with
gradient accumulation; Megatron-LM: the same layout as torchtitan's), exact to the last digit; what a
framework cannot express is counted by its reason, and the planner's own plans are round-tripped
where a framework can express them."""

from __future__ import annotations

from collections import Counter

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from dnnplan.render.export import deepspeed_json, launch_script, torchtitan_toml
from executor.session.predict import predict_plan
from executor.session.predict_launch import launch_step
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.loader import load_network, zoo_names
from planner.export.deepspeed import deepspeed_config
from planner.export.megatron import MEGATRON_SOURCE, megatron_args
from planner.export.megatron_layout import blocks_of
from planner.export.torchtitan import TORCHTITAN_SOURCE, flavor_note, torchtitan_config
from planner.launch_import.formats import read_launch
from planner.plan.plan_file import read_plan
from profiler import context
from tests.support.export_plans import data_plan, uniform_plan

pytestmark = pytest.mark.slow

MACHINE = "dgx-h100"
DEVICES = (8, 64, 512, 4096)
TRANSFORMERS = [name for name in zoo_names() if any(layer.op == "attention" for layer in load_network(name).layers)]
#: (tensor, pipeline stages) of the model-parallel layout at each device count
MODEL_PARALLEL = {8: (1, 1), 64: (8, 1), 512: (8, 4), 4096: (8, 8)}


def firsts(net, stages: int) -> tuple[str, ...] | None:
    """Each stage's first layer, the transformer layers cut as evenly as they go (the rest in the last)."""
    if stages == 1:
        return None
    blocks = blocks_of(net.layers)
    first_of: dict[str, str] = {}
    for layer in net.layers:
        first_of.setdefault(block_of(layer) or "", layer.name)
    k = len(blocks) // stages
    return (net.layers[0].name,) + tuple(first_of[blocks[i * k]] for i in range(1, stages))


def layout_plan(name: str, devices: int):
    """``name`` on ``devices`` in the layout torchtitan and Megatron-LM run: tensor (with sequence
    parallelism) and pipeline as :data:`MODEL_PARALLEL`, ZeRO-3 over the data ranks, the experts
    over as many of them as divide, two micro-batches a stage of one sample a data rank."""
    net = load_network(name)
    heads = next(layer for layer in net.layers if layer.op == "attention").p
    tensor, stages = MODEL_PARALLEL[devices]
    while tensor > 1 and (heads["heads"] % tensor or (heads.get("kv_heads") or heads["heads"]) % tensor):
        tensor //= 2
    stages = min(stages, len(blocks_of(net.layers)))
    data = devices // (tensor * stages)
    micro = 2 * stages
    moe = next((layer for layer in net.layers if layer.op == "moe"), None)
    expert = 1
    while moe is not None and expert * 2 <= data and moe.p["experts"] % (expert * 2) == 0:
        expert *= 2
    return uniform_plan(name, devices=devices, batch=data * micro, tensor=tensor, sp=tensor > 1, expert=expert,
                        stages=stages, micro=micro, firsts=firsts(net, stages), machine=MACHINE, zero=3,
                        precision="bf16", optimizer="adam", overlap="data")


def written(framework: str, plan, net) -> tuple[str, str, str | None]:
    """(the exported file's text, its name, the --network the import needs)."""
    if framework == "torchtitan":
        text = torchtitan_toml(plan, "plan.yaml", torchtitan_config(plan, net), TORCHTITAN_SOURCE, flavor_note(net))
        return text, "job.toml", None
    if framework == "deepspeed":
        return deepspeed_json(deepspeed_config(plan, net)), "ds_config.json", plan.network
    return launch_script(plan, "plan.yaml", "pretrain_gpt.py", megatron_args(plan, net), MEGATRON_SOURCE), \
        "launch.sh", None


def round_trip(framework: str, plan, net) -> str:
    """``exact``, or the reason the framework cannot express the plan; fails when the import predicts
    otherwise than the plan."""
    try:
        text, path, network = written(framework, plan, net)
    except DnnplanError as err:
        return f"refused: {err.bare.split(':')[0]}"
    ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, None, choices=plan.choices)
    want = predict_plan(plan, net, ctx)
    got = launch_step(read_launch(text, path), network, plan.devices, MACHINE)
    assert (got.prediction.step_s, got.prediction.memory_peak_bytes) == (want.step_s, want.memory_peak_bytes), \
        (framework, plan.network, plan.devices)
    return "exact"


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed", "megatron"])
def test_every_zoo_transformer_round_trips_exactly_where_the_framework_expresses_it(framework, capsys):
    outcomes = Counter()
    for name in TRANSFORMERS:
        for devices in DEVICES:
            if framework == "deepspeed":
                plan, net = data_plan(name, devices=devices, batch=2 * devices, micro=2, machine=MACHINE, zero=3,
                                      precision="bf16", optimizer="adam", overlap="data", recompute="full")
            else:
                plan, net = layout_plan(name, devices)
            outcomes[round_trip(framework, plan, net)] += 1
    with capsys.disabled():
        print(f"\n{framework}: {dict(outcomes)}")
    assert outcomes["exact"] >= {"torchtitan": 20, "deepspeed": 40, "megatron": 40}[framework], outcomes
    refused = {reason for reason in outcomes if reason != "exact"}
    assert refused <= {"torchtitan": {"refused: learned position embeddings"}, "deepspeed": set(),
                       "megatron": set()}[framework], outcomes


@pytest.mark.parametrize("name", ["tiny-llama", "llama3-8b"])
def test_the_planners_plans_round_trip_where_a_framework_expresses_them(name, tmp_path, capsys):
    """The planner's plan at 8 devices: exported to each framework that takes it and read back, or
    counted with the reason it is refused (a per-layer hybrid, most often)."""
    path = str(tmp_path / "plan.yaml")
    result = CliRunner().invoke(app, ["plan", name, "-p", "8", "--machine", MACHINE, "--precision", "bf16",
                                      "--time-limit", "10", "--out", path])
    assert result.exit_code == 0, result.output
    plan, net = read_plan(path)
    outcomes = {framework: round_trip(framework, plan, net) for framework in ("torchtitan", "deepspeed", "megatron")}
    with capsys.disabled():
        print(f"\n{name} planned on 8 devices: {outcomes}")
    assert all(o == "exact" or o.startswith("refused: ") for o in outcomes.values())
