"""A plan as Megatron-LM's arguments (planner.export.megatron): plans made in-process as Megatron lays
them out (costmodel.frameworks.megatron) give the degrees, batch, shape, recomputation, precision,
ZeRO and overlap flags they should, every flag one Megatron-LM's parser has; what Megatron cannot
run is refused naming the layer."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.calls.algorithms import with_recompute
from costmodel.parallel.strategy import Strategy
from networks.errors import DnnplanError
from networks.loader import load_network
from planner.export.megatron import MEGATRON_SOURCE, environment, megatron_args, model_setting_args
from planner.export.megatron_layout import MEGATRON, check_sequence
from planner.export.torchtitan import flavor_note
from planner.plan.plan import Plan
from tests.support.export_plans import swapped, uniform_plan as make

#: Megatron-LM's option names, each read in NVIDIA/Megatron-LM at commit
#: d98e8a64ddf34856e74b24714e3bedb2f5a39553 (Megatron-Core 0.20.0): added by hand in
#: megatron/training/arguments.py (--num-layers-per-virtual-pipeline-stage, --seq-length,
#: --group-query-attention, --max-position-embeddings, --position-embedding-type, --swiglu,
#: --untie-embeddings-and-output-weights, --optimizer, --sgd-momentum, --use-distributed-optimizer,
#: --overlap-grad-reduce, --overlap-param-gather, --data-parallel-sharding-strategy,
#: --pipeline-model-parallel-layout, --num-experts, --fp8-param-gather), or by ArgumentGroupFactory
#: (megatron/training/argument_utils.py) from the fields of ModelParallelConfig
#: (megatron/core/model_parallel_config.py: tensor_model_parallel_size, pipeline_model_parallel_size,
#: context_parallel_size, expert_model_parallel_size, expert_tensor_parallel_size, sequence_parallel,
#: fp16, bf16, tp_comm_overlap, overlap_moe_expert_parallel_comm), TransformerConfig
#: (megatron/core/transformer/transformer_config.py: num_layers, hidden_size, num_attention_heads,
#: num_query_groups, kv_channels, ffn_hidden_size, normalization, recompute_granularity,
#: recompute_method, recompute_num_layers, fp8 renamed --fp8-format, moe_router_topk,
#: moe_ffn_hidden_size, moe_token_dispatcher_type, qk_layernorm, moe_grouped_gemm, attention_backend: an AttnBackend of
#: megatron/core/transformer/enums.py, flash fused unfused local auto), TrainingConfig and CheckpointConfig
#: (megatron/training/config/training_config.py: micro_batch_size, global_batch_size, ckpt_format) and
#: DistributedInitConfig (megatron/training/config/common_config.py: use_megatron_fsdp).
#: Not a flag there: --virtual-pipeline-model-parallel-size (its field is excluded from the parser).
MEGATRON_FLAGS = (
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--pipeline-model-parallel-layout", "--context-parallel-size", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--sequence-parallel", "--micro-batch-size", "--global-batch-size",
    "--seq-length", "--num-layers", "--hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--kv-channels", "--ffn-hidden-size", "--swiglu", "--num-experts", "--moe-router-topk",
    "--moe-ffn-hidden-size", "--normalization", "--position-embedding-type", "--max-position-embeddings",
    "--untie-embeddings-and-output-weights", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--fp16", "--bf16", "--fp8-format", "--optimizer", "--sgd-momentum",
    "--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "--ckpt-format",
    "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap", "--overlap-moe-expert-parallel-comm",
    "--moe-token-dispatcher-type", "--attention-backend", "--qk-layernorm", "--moe-grouped-gemm",
    "--fp8-param-gather", "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32",
    "--disable-bias-linear", "--add-qkv-bias", "--attention-dropout", "--hidden-dropout", "--norm-epsilon",
    "--rotary-base", "--use-rope-scaling", "--rope-scaling-factor",
)
GPT2_CHUNKS = ("embed", "h3.ln1", "h6.ln1", "h9.ln1")  # gpt2's 12 transformer layers, 3 a chunk


def flags(args: list[str]) -> dict[str, list[str]]:
    """Each flag with the values after it."""
    out: dict[str, list[str]] = {}
    for arg in args:
        if arg.startswith("--"):
            key = arg
            out[key] = []
        else:
            out[key].append(arg)
    return out


def value(args: list[str], flag: str) -> str:
    got = flags(args)
    assert flag in got, f"{flag} missing from {args}"
    return " ".join(got[flag])



CASES = {
    "gpt-tiny tensor 2": dict(name="gpt-tiny", tensor=2),
    "tiny-gqa tensor 2 sp zero 1 bf16 overlap all selective": dict(
        name="tiny-gqa", tensor=2, sp=True, zero=1, precision="bf16", optimizer="adam", overlap="all",
        recompute="selective"),
    "tiny-moe expert 2 zero 3 fp8 full": dict(name="tiny-moe", expert=2, zero=3, precision="fp8", recompute="full"),
    "tiny-moe folded over tensor 2 flex": dict(name="tiny-moe", tensor=2, sp=True, expert=4, moe_dispatch="flex",
                                               overlap="data+experts"),
    "gpt-tiny pipeline 2": dict(name="gpt-tiny", devices=8, batch=16, stages=2, micro=2, firsts=("embed", "h1.ln1")),
    "tiny-llama pipeline cut unevenly": dict(name="tiny-llama", devices=8, batch=16, stages=2, micro=2,
                                             firsts=("embed", "h0.norm1")),
    "gpt2 interleaved": dict(name="gpt2", devices=8, batch=16, stages=2, micro=2, schedule="interleaved",
                             chunks=2, firsts=GPT2_CHUNKS, tensor=2),
    "gpt-tiny context 2 fp16 sgd": dict(name="gpt-tiny", context=2, precision="fp16", optimizer="sgd"),
    "tiny-llama zero 1 fp8 parameters": dict(name="tiny-llama", zero=1, precision="fp8", fp8_params=True,
                                             machine="dgx-h100"),
}


@pytest.mark.parametrize("case", CASES)
def test_every_flag_is_one_megatron_lm_names(case):
    kwargs = dict(CASES[case])
    args = megatron_args(*make(kwargs.pop("name"), **kwargs))
    assert set(flags(args)) <= set(MEGATRON_FLAGS), set(flags(args)) - set(MEGATRON_FLAGS)
    assert "d98e8a64ddf34856e74b24714e3bedb2f5a39553" in MEGATRON_SOURCE


def test_tensor_parallel_gpt_takes_its_degrees_batch_and_shape():
    args = megatron_args(*make("gpt-tiny", devices=4, batch=8, tensor=2))
    assert value(args, "--tensor-model-parallel-size") == "2"
    assert value(args, "--pipeline-model-parallel-size") == "1"
    assert value(args, "--micro-batch-size") == "4"  # 8 samples over 4 / 2 data-parallel ranks
    assert value(args, "--global-batch-size") == "8"
    assert value(args, "--seq-length") == "32"
    assert [value(args, f) for f in ("--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
                                     "--max-position-embeddings")] == ["2", "64", "4", "256", "32"]
    assert "--sequence-parallel" not in args and "--group-query-attention" not in args
    assert "--recompute-granularity" not in args and "--use-distributed-optimizer" not in args


def test_grouped_query_attention_and_sequence_parallelism():
    args = megatron_args(*make("tiny-gqa", tensor=2, sp=True))
    assert "--sequence-parallel" in args and "--group-query-attention" in args
    assert value(args, "--num-query-groups") == "2"


def test_mixture_of_experts_takes_its_experts_and_dispatcher():
    args = megatron_args(*make("tiny-moe", expert=2))
    assert value(args, "--expert-model-parallel-size") == "2"
    assert [value(args, f) for f in ("--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size")] == ["4", "2", "32"]
    assert "--swiglu" in args and value(args, "--moe-token-dispatcher-type") == "alltoall"
    flex = megatron_args(*make("tiny-moe", expert=2, moe_dispatch="flex"))
    assert value(flex, "--moe-token-dispatcher-type") == "flex"
    folded = megatron_args(*make("tiny-moe", tensor=2, sp=True, expert=4))  # experts over data x tensor ranks
    assert value(folded, "--expert-tensor-parallel-size") == "1"


def test_pipelines_even_uneven_and_interleaved():
    even = megatron_args(*make("gpt-tiny", devices=8, batch=16, stages=2, micro=2, firsts=("embed", "h1.ln1")))
    assert value(even, "--pipeline-model-parallel-size") == "2"
    assert value(even, "--micro-batch-size") == "2"  # 16 / 2 micro-batches over 4 data-parallel ranks
    assert "--pipeline-model-parallel-layout" not in even
    uneven = megatron_args(*make("tiny-llama", devices=8, batch=16, stages=2, micro=2, firsts=("embed", "h0.norm1")))
    assert value(uneven, "--pipeline-model-parallel-layout") == "E|ttL"
    interleaved = megatron_args(*make("gpt2", devices=8, batch=16, stages=2, micro=2, schedule="interleaved",
                                      chunks=2, firsts=GPT2_CHUNKS))
    assert value(interleaved, "--num-layers-per-virtual-pipeline-stage") == "3"
    assert "--pipeline-model-parallel-layout" not in interleaved


@pytest.mark.parametrize("zero, want", [(0, []), (1, ["--use-distributed-optimizer"]),
                                        (2, ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                                             "optim_grads", "--ckpt-format", "fsdp_dtensor"]),
                                        (3, ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                                             "optim_grads_params", "--ckpt-format", "fsdp_dtensor"])])
def test_zero_stages(zero, want):
    args = megatron_args(*make("gpt-tiny", zero=zero, overlap="none"))
    sharding = [a for a in args if a in ("--use-distributed-optimizer", "--use-megatron-fsdp")]
    assert sharding == want[:1]
    if want:
        start = args.index(want[0])
        assert args[start:start + len(want)] == want


def test_overlap_gathers_only_with_a_sharded_optimizer():
    plain = megatron_args(*make("gpt-tiny", overlap="data"))
    assert "--overlap-grad-reduce" in plain and "--overlap-param-gather" not in plain
    assert "--overlap-param-gather" in megatron_args(*make("gpt-tiny", overlap="data", zero=1))
    assert "--tp-comm-overlap" in megatron_args(*make("gpt-tiny", tensor=2, sp=True, overlap="all"))
    with pytest.raises(DnnplanError, match="only with --sequence-parallel"):  # --tp-comm-overlap needs SP
        megatron_args(*make("gpt-tiny", tensor=2, overlap="all"))
    assert "--tp-comm-overlap" not in megatron_args(*make("gpt-tiny", overlap="all"))  # nothing to overlap at tensor 1
    assert "--overlap-grad-reduce" not in megatron_args(*make("gpt-tiny", overlap="none"))


def test_recomputation_selective_full_and_block():
    assert value(megatron_args(*make("gpt-tiny", recompute="selective")), "--recompute-granularity") == "selective"
    full = megatron_args(*make("gpt-tiny", recompute="full"))
    assert [value(full, f) for f in ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")] == \
        ["full", "uniform", "1"]
    plan, net = make("gpt2", devices=8, batch=16, stages=2, micro=2, schedule="interleaved", chunks=2,
                     firsts=GPT2_CHUNKS)
    firsts = {f"h{i}" for i in (0, 3, 6, 9)}  # the first transformer layer of each chunk
    plan = dataclasses.replace(plan, layers=tuple(
        dataclasses.replace(lp, algorithm=with_recompute(lp.algorithm)) if lp.name.split(".")[0] in firsts else lp
        for lp in plan.layers))
    block = megatron_args(plan, net)
    assert [value(block, f) for f in ("--recompute-method", "--recompute-num-layers")] == ["block", "1"]


def test_precisions():
    assert "--fp16" in megatron_args(*make("gpt-tiny", precision="fp16"))
    fp8 = megatron_args(*make("gpt-tiny", precision="fp8"))
    assert "--bf16" in fp8 and value(fp8, "--fp8-format") == "hybrid"
    assert not {"--bf16", "--fp16"} & set(megatron_args(*make("gpt-tiny", precision="fp32")))
    # no flag says TF32: written as fp32's arguments, the file would read back priced in full FP32
    with pytest.raises(DnnplanError, match="no TF32 switch") as err:
        megatron_args(*make("gpt-tiny", precision="tf32"))
    assert "--precision bf16, fp16, fp8 or fp32" in err.value.hint


def test_attention_kernels_one_backend():
    plan, net = make("gpt-tiny")
    assert "--attention-backend" not in megatron_args(plan, net)  # flash, dgx-a100's default: Megatron's auto
    unfused = plan
    for name in ("h0.attn", "h1.attn"):
        unfused = swapped(unfused, name, algorithm="materialized")
    assert value(megatron_args(unfused, net), "--attention-backend") == "unfused"
    err = refusal(swapped(plan, "h1.attn", algorithm="materialized"), net)
    assert err.layer == "h1.attn" and "one attention backend" in str(err)


def refusal(plan: Plan, net) -> DnnplanError:
    with pytest.raises(DnnplanError) as got:
        megatron_args(plan, net)
    return got.value


def test_a_cnn_is_refused_naming_its_first_convolution():
    err = refusal(*make("resnet18", batch=8))
    assert err.layer == "conv1" and "conv2d" in err.bare


def test_a_per_layer_hybrid_is_refused_naming_the_layer():
    plan, net = make("gpt-tiny", tensor=2)
    err = refusal(swapped(plan, "h1.fc", strategy=Strategy.of(4, N=4)), net)
    assert err.layer == "h1.fc" and "tensor 1, not 2" in err.bare
    assert "export with --nearest" in err.hint and "without a pipeline" in err.hint  # what predict --out writes


def test_a_schedule_megatron_lacks_and_a_cut_inside_a_layer_are_refused():
    assert "gpipe" in refusal(*make("gpt-tiny", devices=8, batch=16, stages=2, micro=2, schedule="gpipe",
                                    firsts=("embed", "h1.ln1"))).bare
    err = refusal(*make("gpt-tiny", devices=8, batch=16, stages=2, micro=2, firsts=("embed", "h0.attn")))
    assert err.layer == "h0.attn" and "inside transformer layer h0" in err.bare


def test_recomputing_part_of_a_transformer_layer_is_refused():
    plan, net = make("gpt-tiny", recompute="full")
    err = refusal(swapped(plan, "h1.fc", algorithm=""), net)
    assert err.layer == "h1.fc"


def test_a_micro_batch_the_data_ranks_cannot_share_is_refused():
    assert "does not split" in refusal(*make("gpt-tiny", devices=8, batch=4)).bare


def test_a_sequence_context_or_sequence_parallelism_cannot_split_is_refused():
    """Megatron-Core splits a sequence into 2 x CP chunks (validate_args: seq-length a multiple of
    2 x context-parallel-size), and sequence parallelism a context rank's positions over the tensor
    ranks: gpt-tiny's 32 positions under context 3, and 15 positions under tensor 2 with sequence
    parallelism, are refused naming the attention layer and the fix; 16 under tensor 2 without it runs."""
    err = refusal(*make("gpt-tiny", devices=6, batch=6, context=3))
    assert err.layer == "h0.attn" and "2 x 3 chunks" in err.bare and "not a multiple of 2 x context = 6" in err.bare
    assert "2 x context divides 32" in err.hint
    assert value(megatron_args(*make("gpt-tiny", devices=8, batch=8, context=4)), "--context-parallel-size") == "4"
    odd = load_network("tiny-llama", 15)
    with pytest.raises(DnnplanError, match="context x tensor = 2") as got:
        check_sequence(odd, MEGATRON, 2, 1, True)
    assert got.value.layer == "h0.attn" and "--seq a multiple of 2" in got.value.hint
    check_sequence(odd, MEGATRON, 2, 1, False)  # tensor parallelism alone keeps the whole sequence
    with pytest.raises(DnnplanError, match="2 x context = 4"):
        check_sequence(load_network("tiny-llama", 18), MEGATRON, 1, 2, False)


def test_a_layers_differences_name_a_transformers_sequence_split_once():
    """A transformer's H split is its context degree: the refusal says context 4, not 1, and not
    also spatial 4, not 1 (the image axes are a CNN's)."""
    from costmodel.parallel.strategy import parse_degrees
    from planner.export.megatron_layout import _differences
    got, want = parse_degrees("N=16,H=4", 64), parse_degrees("N=16,C=4,SP", 64)
    assert _differences(got, want) == " (context 4, not 1; tensor 1, not 4)"


def test_the_nearest_layout_is_sequence_parallel_only_with_tensor_parallelism():
    from planner.export.nearest_layouts import Layout
    assert str(Layout(1, 4, 1, True)) == "tensor 1, context 4, expert 1"
    assert str(Layout(2, 1, 1, True)) == "tensor 2, context 1, expert 1 (sequence-parallel)"
    assert not Layout(1, 4, 1, True).sequence_parallel


@pytest.mark.parametrize("kw, line", [
    (dict(tensor=2, sp=True, zero=1), "export CUDA_DEVICE_MAX_CONNECTIONS=1"),  # validate_args asserts 1 before SM 10
    (dict(tensor=2, sp=True, zero=3), "unset CUDA_DEVICE_MAX_CONNECTIONS"),  # Megatron-FSDP asserts it is not 1
    (dict(zero=1), None),  # data parallelism alone: nothing asserted
])
def test_the_launch_sets_the_connections_megatron_asserts(kw, line):
    """megatron/training/arguments.py validate_args at d98e8a64: 'FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1
    or unset', and under tensor or context parallelism without FSDP 'require setting the environment variable
    CUDA_DEVICE_MAX_CONNECTIONS to 1'; the script sets it so before the launcher, and reads back."""
    plan, net = make("tiny-llama", devices=4, optimizer="adam", precision="bf16", machine="dgx-h100", **kw)
    env = environment(megatron_args(plan, net))
    assert [e.split("  #")[0] for e in env] == ([line] if line else [])



@pytest.mark.parametrize("name, bias, dropout", [("llama3-8b", False, False), ("tiny-gqa", True, False),
                                                 ("gpt2", True, True)])
def test_biases_and_dropout_the_network_lacks_are_turned_off(name, bias, dropout):
    """Megatron-LM adds biases to every linear layer and 0.1 dropout unless told otherwise
    (transformer_config.py at d98e8a64): a network without them is exported with them off."""
    net = load_network(name)
    args = model_setting_args(net)
    assert ("--disable-bias-linear" in args) is not bias
    assert (args[-4:] == ["--attention-dropout", "0", "--hidden-dropout", "0"]) is not dropout


def test_biases_on_the_query_key_and_value_alone_are_added_back():
    """Qwen2's layers: no bias on any linear layer but the q/k/v projections' (``qkv_bias``):
    ``--disable-bias-linear`` turns every bias off, ``--add-qkv-bias`` (TransformerConfig.add_qkv_bias
    at d98e8a64) turns those back on, so Megatron-LM builds the layers dnnplan priced."""
    net = load_network("tiny-llama")
    qwen2 = dataclasses.replace(net, layers=tuple(
        dataclasses.replace(layer, params=tuple({**layer.p, "qkv_bias": True}.items())) if layer.op == "attention"
        else layer
        for layer in net.layers))
    assert model_setting_args(qwen2)[:2] == ["--disable-bias-linear", "--add-qkv-bias"]
    fine = dataclasses.replace(qwen2, layers=tuple(
        dataclasses.replace(layer, params=tuple({**layer.p, "eps": 1e-6}.items())) if layer.op == "rmsnorm"
        else layer for layer in qwen2.layers))
    assert flags(model_setting_args(fine))["--norm-epsilon"] == ["1e-06"]  # Qwen2's; Megatron-LM's is 1e-5
    assert "--norm-epsilon" not in model_setting_args(qwen2)
    assert "--add-qkv-bias" not in model_setting_args(net)
    assert "--add-qkv-bias" not in model_setting_args(load_network("gpt2"))  # biases everywhere: Megatron's default


def test_the_rotary_base_is_written_where_it_is_not_megatrons():
    """Llama 3's rope_theta 500000 (its zoo spec's rotary_base, from the released config.json) as
    --rotary-base, a whole number (megatron/training/arguments.py at d98e8a64, default 10000); Llama
    2's, unset, is Megatron-LM's default; a base that is not whole is refused, naming the layer."""
    assert flags(model_setting_args(load_network("llama3-8b")))["--rotary-base"] == ["500000"]
    assert flags(model_setting_args(load_network("qwen3-30b-a3b")))["--rotary-base"] == ["1000000"]
    assert "--rotary-base" not in model_setting_args(load_network("llama2-7b"))
    assert "--rotary-base" not in model_setting_args(load_network("gpt2"))  # learned positions
    net = load_network("tiny-llama")
    odd = dataclasses.replace(net, layers=tuple(
        dataclasses.replace(layer, params=tuple({**layer.p, "rotary_base": 12345.5}.items()))
        if layer.op == "attention" else layer for layer in net.layers))
    with pytest.raises(DnnplanError, match="rotary_base 12345.5: Megatron-LM's --rotary-base takes a whole number"):
        model_setting_args(odd)


def test_llama_31s_rotary_scaling_is_written_with_its_factor_where_it_is_not_megatrons():
    """Llama 3.1's rope_scaling as --use-rope-scaling (megatron/training/arguments.py at d98e8a64:
    'Apply rope scaling as used in llama3.x'), with --rope-scaling-factor where the factor is not its
    default 8 (Llama 3.2's 32); Llama 3's, none, writes neither."""
    assert "--use-rope-scaling" in model_setting_args(load_network("llama3.1-405b"))
    assert "--rope-scaling-factor" not in model_setting_args(load_network("llama3.1-405b"))
    assert "--use-rope-scaling" not in model_setting_args(load_network("llama3-8b"))
    got = flags(model_setting_args(load_network("llama3-8b").with_param("attention", "rope_scaling", 32.0)))
    assert got["--use-rope-scaling"] == [] and got["--rope-scaling-factor"] == ["32"]


def test_attention_layers_that_disagree_on_a_rotary_setting_are_refused_naming_the_first_that_differs():
    """Megatron-LM's --rotary-base and --use-rope-scaling, and torchtitan's model arguments, hold one
    value for the whole model: a network whose attention layers differ is refused, not written with
    none of them."""
    net = load_network("tiny-llama")
    attn = [layer.name for layer in net.layers if layer.op == "attention"]
    mixed = dataclasses.replace(net, layers=tuple(
        dataclasses.replace(layer, params=tuple({**layer.p, "rope_scaling": 8.0}.items()))
        if layer.name == attn[-1] else layer for layer in net.layers))
    with pytest.raises(DnnplanError) as err:
        model_setting_args(mixed)
    assert err.value.layer == attn[-1] and "rope_scaling 8.0 where" in err.value.bare
    with pytest.raises(DnnplanError):
        flavor_note(mixed)


def test_expert_overlap_with_full_recomputation_is_refused():
    """transformer_config.py at d98e8a64: 'disable full recomputation when enabling
    overlap_moe_expert_parallel_comm'; the plan priced the all-to-alls hidden, so it is refused, not
    written without the overlap."""
    with pytest.raises(DnnplanError, match="overlap \\+experts with full recomputation"):
        megatron_args(*make("tiny-moe", devices=4, expert=2, recompute="full", overlap="data+experts"))
    assert "--overlap-moe-expert-parallel-comm" in megatron_args(*make("tiny-moe", devices=4, expert=2,
                                                                       overlap="data+experts"))
