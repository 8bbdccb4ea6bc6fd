"""The nearest plan a framework runs (planner.export.nearest): a per-layer hybrid made uniform by the
layout most of its transformer layers take, recomputation and schedules as the framework has them,
ZeRO-1 on torchtitan as FSDP; each change said; the result exported; what no change reaches (learned
positions on torchtitan, a tensor layout on DeepSpeed's JSON) still refused."""

from __future__ import annotations

import pytest

from costmodel.calls.algorithms import default_algorithms, is_recomputed, with_recompute
from costmodel.machine.loading import load_machine
from costmodel.parallel.strategy import Strategy
from dnnplan.render.export import deepspeed_json
from executor.session.export_nearest import nearest_export, priced
from executor.session.predict_launch import launch_step
from networks.errors import DnnplanError
from planner.export.deepspeed import deepspeed_config
from planner.export.megatron import megatron_args
from planner.export.megatron_layout import micro_hint
from planner.export.nearest import nearest_plan, recompute_counts
from planner.export.nearest_layouts import Layout, layouts_weighed, most_common_layout
from planner.export.torchtitan import torchtitan_config
from planner.launch_import.formats import read_launch
from planner.plan.plan import Plan
from tests.support.export_plans import data_plan, swapped, uniform_plan

A100 = load_machine("dgx-a100")



def test_an_expressible_plan_is_its_own_nearest():
    plan, net = uniform_plan("gpt-tiny", tensor=2)
    got = nearest_plan(plan, net, "megatron", A100)
    assert got.changes == () and got.plan == plan


def test_a_hybrid_is_made_uniform_by_its_blocks_most_common_layout():
    """tiny-llama's two transformer layers under tensor 2 with the embedding and one MLP layer split
    over the samples: both blocks' attention runs tensor 2, and every layer then takes Megatron's split."""
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16",
                             machine="dgx-h100")
    hybrid = swapped(swapped(plan, "embed", strategy=Strategy.of(4, N=4)), "h1.down", strategy=Strategy.of(4, N=4))
    with pytest.raises(DnnplanError):
        megatron_args(hybrid, net)
    layout, count, blocks = most_common_layout(hybrid, net)
    assert (layout.tensor, layout.sequence_parallel, count, blocks) == (2, True, 2, 2)  # attention decides a block
    got = nearest_plan(hybrid, net, "megatron", A100)
    assert got.plan.strategies() == plan.strategies()
    assert len(got.changes) == 1 and "2 layers split otherwise before, the first embed" in got.changes[0]
    assert "--tensor-model-parallel-size" in megatron_args(got.plan, net)


def test_a_plan_whose_attention_and_mlps_split_otherwise_weighs_both_layouts():
    """tiny-llama under tensor 2 with sequence parallelism, each attention layer then split over the
    samples instead: attention's layout (tensor 1) is the most common, weighed first, and the MLPs'
    (tensor 2, sequence-parallel) after it, whose nearest plan is the uniform plan again; DeepSpeed's
    file states data parallelism alone, so it weighs the first alone."""
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16",
                             machine="dgx-h100")
    hybrid = swapped(swapped(plan, "h0.attn", strategy=Strategy.of(4, N=4)), "h1.attn", strategy=Strategy.of(4, N=4))
    weighed = layouts_weighed(hybrid, net, "megatron")
    assert weighed[0].layout == Layout() and weighed[0].whose == "that of 2 of the 2 transformer layers"
    mlp = next(w for w in weighed if w.layout == Layout(2, 1, 1, True))
    assert mlp.whose == "one that 2 of the 2 transformer layers take in part"
    got = nearest_plan(hybrid, net, "megatron", A100, mlp)
    assert got.plan.strategies() == plan.strategies()
    assert "tensor 2, context 1, expert 1 (sequence-parallel) (one that 2 of the 2" in got.changes[0]
    assert nearest_plan(hybrid, net, "megatron", A100).plan.strategies() != plan.strategies()
    assert layouts_weighed(hybrid, net, "deepspeed") == weighed[:1]
    # Megatron-LM leaves sequence parallelism to the user: both weighed; torchtitan's tensor parallelism has it
    assert Layout(2, 1, 1, False) in [w.layout for w in weighed]
    assert Layout(2, 1, 1, False) not in [w.layout for w in layouts_weighed(hybrid, net, "torchtitan")]


def test_a_tensor_degree_of_the_embedding_or_head_alone_is_weighed_too():
    """The embedding and LM head split over tensor 4 where the transformer layers run tensor 2: a
    layout of tensor 4 on every layer is weighed, named by the layer that takes it."""
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16",
                             machine="dgx-h100")
    wide = swapped(plan, "embed", strategy=Strategy.of(4, F=4))
    weighed = {w.layout: w.whose for w in layouts_weighed(wide, net, "megatron")}
    assert weighed[Layout(4, 1, 1, True)] == "tensor 4 as embed takes it"


def test_the_most_common_layouts_model_parallel_ranks_split_otherwise_are_weighed_after_it():
    """A hybrid whose transformer layers run tensor 4: tensor 2 x context 2 is weighed too, though no
    layer takes it (Llama 3.1 405B on 256 H200s to torchtitan: tensor 2 x context 2, 88.8 s, where
    the tensor 4 its layers took gave 90.0 s), with and without sequence parallelism on Megatron-LM,
    with it on torchtitan; no layout is weighed twice."""
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=4, sp=True, optimizer="adam", precision="bf16",
                             machine="dgx-h100")
    hybrid = swapped(plan, "embed", strategy=Strategy.of(4, N=4))
    weighed = {w.layout: w for w in layouts_weighed(hybrid, net, "megatron")}
    assert list(weighed)[0] == Layout(4, 1, 1, True) and len(weighed) == len(layouts_weighed(hybrid, net, "megatron"))
    split = "the most common layout's 4 ranks of tensor x context split otherwise"
    assert weighed[Layout(2, 2, 1, True)].whose == split and weighed[Layout(2, 2, 1, False)].whose == split
    titan = {w.layout: w.whose for w in layouts_weighed(hybrid, net, "torchtitan")}
    assert titan[Layout(2, 2, 1, True)] == split and Layout(2, 2, 1, False) not in titan
    got = nearest_plan(hybrid, net, "megatron", A100, weighed[Layout(2, 2, 1, True)])
    assert "tensor 2, context 2, expert 1 (sequence-parallel)" in got.changes[0] and split in got.changes[0]
    assert "--context-parallel-size" in megatron_args(got.plan, net)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan"])
def test_the_loss_recomputed_alone_becomes_none_or_every_transformer_layer(framework):
    """A plan recomputing its loss alone: the frameworks recompute transformer layers only, so its
    nearest plan recomputes nothing, or (``whole``, the caller's other choices) every transformer
    layer whole for the memory."""
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16",
                             machine="dgx-h100")
    lossy = swapped(plan, "loss", algorithm=with_recompute(""))
    got = nearest_plan(lossy, net, framework, A100)
    assert not any(is_recomputed(a) for a in got.plan.algorithms().values())
    assert any(c.startswith("no recomputation, where the plan recomputed loss, outside the transformer layers")
               for c in got.changes)
    assert recompute_counts(lossy, net, framework) == (2, 1 if framework == "megatron" else 2)
    whole = nearest_plan(lossy, net, framework, A100, whole=2)
    recomputed = {name for name, a in whole.plan.algorithms().items() if is_recomputed(a)}
    assert recomputed == {layer.name for layer in net.layers if layer.name.startswith(("h0.", "h1."))}


def test_recomputation_of_part_of_a_layer_becomes_the_frameworks():
    plan, net = uniform_plan("gpt-tiny", tensor=2)
    attention_and_dropout = swapped(swapped(plan, "h0.attn", algorithm=with_recompute("flash")), "h0.attn_drop",
                                    algorithm="recompute")  # what the planner may choose: refused as it is
    with pytest.raises(DnnplanError):
        megatron_args(attention_and_dropout, net)
    got = nearest_plan(attention_and_dropout, net, "megatron", A100)
    megatron_args(got.plan, net)
    recomputed = {name for name, a in got.plan.algorithms().items() if is_recomputed(a)}
    assert recomputed == {layer.name for layer in net.layers if layer.op == "attention"}  # selective
    assert "selective" in " ".join(got.changes)
    full, _ = uniform_plan("tiny-llama", recompute="full", optimizer="adam", precision="bf16", zero=3,
                           machine="dgx-h100")
    partial = swapped(full, "h1.add2", algorithm="")
    for framework in ("torchtitan", "deepspeed"):
        got = nearest_plan(partial, net_of(partial), framework, load_machine("dgx-h100"))
        recomputed = {name for name, a in got.plan.algorithms().items() if is_recomputed(a)}
        assert recomputed == {name for name, a in full.algorithms().items() if is_recomputed(a)}, framework
        assert "every transformer layer whole (full)" in " ".join(got.changes)


def test_a_plan_recomputing_its_mixtures_of_experts_is_not_made_selective():
    """tiny-moe recomputing both blocks' mixtures of experts and one block's attention: Megatron-LM's
    selective recomputation would rerun attention's core alone and keep the experts' activations
    (the planner's Qwen3 30B-A3B plan on 64 H100s so became 218.84 GiB a device where it held
    79.74), so the nearest recomputes every transformer layer whole, and holds less than selective
    recomputation would."""
    full, net = uniform_plan("tiny-moe", recompute="full", optimizer="adam", precision="bf16", machine="dgx-h100")
    partial = full
    for layer in net.layers:
        if layer.op not in ("moe",) and layer.name != "h0.attn":
            partial = swapped(partial, layer.name, algorithm="")
    recomputing = {name for name, a in partial.algorithms().items() if is_recomputed(a)}
    assert {net.layer(name).op for name in recomputing} == {"moe", "attention"}
    got = nearest_plan(partial, net, "megatron", load_machine("dgx-h100"))
    assert "every transformer layer whole (full)" in " ".join(got.changes)
    assert {name for name, a in got.plan.algorithms().items() if is_recomputed(a)} == \
        {name for name, a in full.algorithms().items() if is_recomputed(a)}
    selective, _ = uniform_plan("tiny-moe", recompute="selective", optimizer="adam", precision="bf16",
                                machine="dgx-h100")
    assert priced(got.plan, net).memory_peak_bytes < priced(selective, net).memory_peak_bytes
    # the export weighs the other recomputations Megatron-LM states beside it: where all fit, the fastest
    made = nearest_export(partial, net, "megatron")
    assert made.nearest.step_s <= priced(got.plan, net).step_s
    attention_only = full
    for layer in net.layers:
        if layer.op != "attention":
            attention_only = swapped(attention_only, layer.name, algorithm="")
    assert nearest_plan(attention_only, net, "megatron", load_machine("dgx-h100")).changes == ()
    args = megatron_args(attention_only, net)  # attention alone recomputed is Megatron-LM's selective
    assert args[args.index("--recompute-granularity") + 1] == "selective"


def test_megatron_recomputes_as_many_first_layers_whole_as_the_plan_recomputes_part_of():
    """Megatron-LM's block method: a plan recomputing part of one of tiny-llama's two transformer
    layers (not its attention, which would make it selective) becomes the first one recomputed
    whole (--recompute-method block, 1 layer), not both; torchtitan, which lacks the method,
    recomputes both."""
    full, net = uniform_plan("tiny-llama", recompute="full", optimizer="adam", precision="bf16", zero=3,
                             machine="dgx-h100")
    h1 = [layer.name for layer in net.layers if layer.name.startswith("h1.")]
    partial = swapped(swapped(full, "h0.add2", algorithm=""), "h0.attn", algorithm="flash")
    for name in h1:
        partial = swapped(partial, name, algorithm="")
    got = nearest_plan(partial, net, "megatron", load_machine("dgx-h100"))
    recomputed = {name for name, a in got.plan.algorithms().items() if is_recomputed(a)}
    assert recomputed == {layer.name for layer in net.layers if layer.name.startswith("h0.")}
    assert "the first transformer layer whole (full, block)" in " ".join(got.changes)
    args = megatron_args(got.plan, net)
    assert args[args.index("--recompute-method") + 1] == "block"
    assert args[args.index("--recompute-num-layers") + 1] == "1"
    titan = nearest_plan(partial, net, "torchtitan", load_machine("dgx-h100"))
    assert "every transformer layer whole (full)" in " ".join(titan.changes)


def test_a_refused_recomputation_names_the_frameworks_own_and_the_nearest():
    """Part of a transformer layer recomputed: each exporter's one line says how its own framework
    recomputes (torchtitan's and DeepSpeed's once named Megatron-LM's) and offers --nearest."""
    full, net = uniform_plan("tiny-llama", recompute="full", optimizer="adam", precision="bf16", zero=3,
                             machine="dgx-h100")
    partial = swapped(full, "h1.add2", algorithm="")
    data, dnet = data_plan("tiny-llama", devices=4, batch=8, recompute="full", optimizer="adam", precision="bf16",
                           machine="dgx-h100")
    for export, plan, pnet, own in ((megatron_args, partial, net, "Megatron-LM recomputes"),
                                    (torchtitan_config, partial, net, "torchtitan recomputes"),
                                    (deepspeed_config, swapped(data, "h1.add2", algorithm=""), dnet,
                                     "DeepSpeed's activation checkpointing")):
        with pytest.raises(DnnplanError) as err:
            export(plan, pnet)
        assert err.value.layer == "h1.add2", (export.__name__, err.value.layer)
        assert own in err.value.hint and "--nearest" in err.value.hint, err.value.hint
        assert "Megatron" not in err.value.hint or export is megatron_args, err.value.hint


def net_of(plan: Plan):
    return uniform_plan(plan.network, optimizer=plan.choices.optimizer, precision=plan.choices.precision)[1]


def test_zero_1_on_torchtitan_becomes_fsdp_and_learned_positions_stay_refused():
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16", zero=1,
                             machine="dgx-h100")
    with pytest.raises(DnnplanError, match="ZeRO-1"):
        torchtitan_config(plan, net)
    got = nearest_plan(plan, net, "torchtitan", load_machine("dgx-h100"))
    assert got.plan.choices.zero == 2 and "ZeRO-1 as FSDP" in got.changes[0]
    assert torchtitan_config(got.plan, net)["parallelism"]["fsdp_reshard_after_forward"] == "never"
    gpt, gnet = uniform_plan("gpt-tiny", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16", zero=3)
    near = nearest_plan(gpt, gnet, "torchtitan", A100)
    with pytest.raises(DnnplanError, match="learned position embeddings"):
        torchtitan_config(near.plan, gnet)


def test_a_cut_inside_a_layer_and_gpipe_become_megatrons():
    plan, net = uniform_plan("gpt-tiny", devices=8, batch=16, stages=2, micro=2, schedule="gpipe",
                             firsts=("embed", "h1.attn"))
    got = nearest_plan(plan, net, "megatron", A100)
    assert got.plan.pipeline.first_layers == ("embed", "h1.ln1") and got.plan.pipeline.schedule == "1f1b"
    assert "--pipeline-model-parallel-size" in megatron_args(got.plan, net)


def test_deepspeed_takes_a_data_parallel_majority_and_refuses_a_tensor_one():
    plan, net = data_plan("tiny-llama", devices=4, batch=8, optimizer="adam", precision="bf16", machine="dgx-h100")
    hybrid = swapped(plan, "h0.gate_up", strategy=Strategy.of(4, N=2, F=2))
    with pytest.raises(DnnplanError):
        deepspeed_config(hybrid, net)
    got = nearest_plan(hybrid, net, "deepspeed", load_machine("dgx-h100"))
    assert got.plan.strategies() == plan.strategies() and deepspeed_config(got.plan, net)["train_batch_size"] == 8
    tensor, tnet = uniform_plan("tiny-llama", devices=4, tensor=2, sp=True, optimizer="adam", precision="bf16",
                                machine="dgx-h100")
    with pytest.raises(DnnplanError, match="DeepSpeed's configuration states data parallelism only"):
        nearest_plan(tensor, tnet, "deepspeed", load_machine("dgx-h100"))


def test_a_cnn_hybrid_becomes_data_parallel_on_deepspeed_and_stays_refused_on_megatron():
    plan, net = data_plan("lenet5", devices=4, batch=8)
    hybrid = swapped(plan, "conv2", strategy=Strategy.of(4, N=2, F=2))
    got = nearest_plan(hybrid, net, "deepspeed", A100)
    assert got.plan.strategies() == plan.strategies() and "no transformer layers" in got.changes[0]
    assert deepspeed_config(got.plan, net)["train_micro_batch_size_per_gpu"] == 2
    with pytest.raises(DnnplanError, match="conv2d"):
        nearest_plan(hybrid, net, "megatron", A100)
    recomputed, rnet = data_plan("resnet18", devices=4, batch=64, optimizer="momentum", recompute="full")
    got = nearest_plan(recomputed, rnet, "deepspeed", A100)  # its residual blocks are no transformer layers
    assert not any(is_recomputed(a) for a in got.plan.algorithms().values()) and "no recomputation" in got.changes[0]
    assert "activation_checkpointing" not in deepspeed_config(got.plan, rnet)


def test_a_micro_batch_that_does_not_split_says_how_to_replan():
    """The batch not a multiple of the ranks: a batch that is; a batch that is, in too many
    micro-batches: at most batch / ranks of them."""
    assert micro_hint(36, 1, 8) == "re-plan with a batch a multiple of the 8 devices"
    hint = micro_hint(64, 64, 8, "data-parallel ranks")
    assert "accumulates 64 micro-batches of 1: re-plan in at most 8" in hint and "64 / K a multiple of 8" in hint
    assert "`dnnplan plan NETWORK ... --pipeline 1 --micro-batches K --out PLAN.yaml`" in hint  # a command that writes it


def test_a_cnns_nearest_on_deepspeed_runs_the_convolutions_the_file_read_back_runs():
    """DeepSpeed's JSON names no convolution algorithm and is read back with each convolution at the
    default (planner.launch_import.to_plan): the nearest plan takes that default where the planner
    chose others, says so, and its file read back predicts its step and memory to the last digit."""
    plan, net = data_plan("resnet18", devices=4, batch=64, optimizer="momentum")
    convs = [layer.name for layer in net.layers if layer.op == "conv2d"]
    chosen = plan
    for name in convs:
        chosen = swapped(chosen, name, algorithm="direct")  # the planner's choice, which the file cannot say
    hybrid = swapped(chosen, "fc", strategy=Strategy.of(4, N=2, F=2))
    for original in (chosen, hybrid):
        near = nearest_export(original, net, "deepspeed")
        assert {name: near.plan.algorithms()[name] for name in convs} == default_algorithms(net)
        assert f"the first {convs[0]}" in " ".join(near.changes) and "names no convolution" in " ".join(near.changes)
        text = deepspeed_json(deepspeed_config(near.plan, net))
        back = launch_step(read_launch(text, "ds_config.json"), "resnet18", 4, "dgx-a100").prediction
        assert (back.step_s, back.memory_peak_bytes) == (near.plan.step_s, near.plan.memory_peak_bytes)
        assert (near.nearest.step_s, int(near.nearest.memory_peak_bytes)) == (near.plan.step_s,
                                                                            near.plan.memory_peak_bytes)


def test_a_micro_batch_the_data_ranks_cannot_share_is_named_as_such_by_the_nearest_plan():
    """8 samples in 8 micro-batches of 1 over 4 data-parallel ranks: no layout change reaches it, and
    --nearest says so as the exporter does (the micro-batches, not the degrees), for each framework."""
    plan, net = uniform_plan("tiny-llama", devices=4, batch=8, micro=8, optimizer="adam", precision="bf16",
                             machine="dgx-h100", zero=3)
    for framework in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(DnnplanError) as err:
            nearest_plan(plan, net, framework, load_machine("dgx-h100"))
        assert "a micro-batch of 1 samples does not split over 4" in err.value.bare, (framework, err.value.bare)
        assert "re-plan in at most 2" in err.value.hint and "tensor, context and expert" not in err.value.hint


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_weights_kept_otherwise_become_the_precisions_own_where_the_file_states_no_such_thing(framework):
    """FP8 parameters and float32 gradients, which torchtitan's and DeepSpeed's files as dnnplan writes
    them do not state, are left out by the nearest plan, one line each; Megatron-LM writes both."""
    H100 = load_machine("dgx-h100")
    fp8 = framework == "torchtitan"  # DeepSpeed's JSON refuses fp8 itself
    plan, net = data_plan("tiny-llama", devices=4, optimizer="adam", precision="fp8" if fp8 else "bf16", zero=3,
                          fp8_params=fp8, grad_fp32=True, machine="dgx-h100")
    export = torchtitan_config if framework == "torchtitan" else deepspeed_config
    with pytest.raises(DnnplanError, match="FP8 parameters" if fp8 else "float32 gradients"):
        export(plan, net)
    got = nearest_plan(plan, net, framework, H100)
    assert not got.plan.choices.grad_fp32 and not got.plan.choices.fp8_params
    assert sum("not float32" in c for c in got.changes) == 1
    assert sum("FP8 parameters as a 16-bit weight" in c for c in got.changes) == (1 if fp8 else 0)
    export(got.plan, net)  # now expressible
    kept = nearest_plan(plan, net, "megatron", H100)
    assert kept.plan.choices.grad_fp32 and kept.plan.choices.fp8_params is fp8


def test_tensor_overlap_without_sequence_parallelism_is_refused_and_becomes_data_overlap():
    """Megatron-LM overlaps the tensor-parallel collectives (--tp-comm-overlap) only under sequence
    parallelism: a plan priced with them hidden is refused, and its nearest plan overlaps the data's."""
    plan, net = uniform_plan("tiny-llama", devices=4, tensor=2, optimizer="adam", precision="bf16", zero=1,
                             overlap="all", machine="dgx-h100")
    with pytest.raises(DnnplanError, match="only with --sequence-parallel"):
        megatron_args(plan, net)
    got = nearest_plan(plan, net, "megatron", load_machine("dgx-h100"))
    assert got.plan.choices.overlap == "data" and "overlap data, where the plan's is all" in got.changes[0]
    assert "--tp-comm-overlap" not in megatron_args(got.plan, net)


def test_experts_under_ddp_on_torchtitan_are_refused_and_become_fsdp():
    """torchtitan v0.2.2 splits the experts over FSDP's shard dimension (parallel_dims.py: efsdp =
    shard x context x tensor / (expert tensor x expert)): under DDP an expert degree over context x
    tensor has nothing to split, and its own reader refused the file the export wrote."""
    plan, net = uniform_plan("qwen3-30b-a3b", devices=8, expert=8, optimizer="adam", precision="bf16", zero=0,
                             machine="dgx-h100")
    with pytest.raises(DnnplanError, match="splits FSDP's shard dimension"):
        torchtitan_config(plan, net)
    got = nearest_plan(plan, net, "torchtitan", load_machine("dgx-h100"))
    assert got.plan.choices.zero == 2 and "splits the experts over FSDP's shard dimension" in got.changes[-1]
    torchtitan_config(got.plan, net)
