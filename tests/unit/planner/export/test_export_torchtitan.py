"""A plan as torchtitan's job TOML (planner.export.torchtitan): plans made in-process as Megatron lays
them out give the data-parallel kind, degrees, pipeline cut, batch, recomputation, precision, overlap
and model they should, every key and choice one torchtitan 0.2 reads; what torchtitan cannot run is
refused naming the layer."""

from __future__ import annotations

import pytest

from costmodel.machine.loading import load_machine
from networks.errors import DnnplanError
from networks.loader import load_network
from planner.export.megatron_layout import check_sequence
from planner.export.nearest import nearest_plan
from planner.export.torchtitan import TORCHTITAN, TORCHTITAN_SOURCE, flavor_note, torchtitan_config
from tests.support.export_plans import swapped, uniform_plan as make

#: torchtitan's sections and their keys, the fields of the dataclasses JobConfig holds in
#: torchtitan/config/job_config.py at pytorch/torchtitan tag v0.2.2 (commit
#: 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce): Job, Model, Optimizer, Training, Parallelism,
#: ActivationCheckpoint, Compile, and Quantize.linear (QuantizedLinear) .float8 (Float8Linear)
TORCHTITAN_KEYS = {
    "job": {"config_file", "dump_folder", "description", "print_config", "save_config_file", "custom_config_module"},
    "model": {"name", "flavor", "hf_assets_path", "tokenizer_path", "converters", "print_after_conversion"},
    "optimizer": {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation", "early_step_in_backward"},
    "training": {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce", "gc_freq",
                 "gc_debug", "dataloader"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "pipeline_parallel_degree", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_expert_parallel_overlap", "context_parallel_degree",
                    "context_parallel_load_balancer", "context_parallel_rotate_method", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "expert_parallel_comm_backend"},
    "activation_checkpoint": {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns",
                              "early_stop", "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
                              "determinism_check", "debug"},
    "compile": {"enable", "components", "backend"},
    "quantize.linear.float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp",
                               "recipe_name", "filter_fqns", "emulate"},
}
#: the values a key takes where torchtitan names them, read at the same tag: the Literal types of
#: job_config.py (fsdp_reshard_after_forward, mode, mixed_precision_param, recipe_name,
#: expert_parallel_comm_backend, compile's components as the default lists them), the optimisers
#: torchtitan/components/optimizer.py builds ("Adam", "AdamW"), the converter
#: torchtitan/components/quantization/float8.py registers, and the schedules pytorch/pytorch's
#: torch/distributed/pipelining/schedules.py get_schedule_class maps (the page job_config.py cites)
TORCHTITAN_VALUES = {
    ("parallelism", "fsdp_reshard_after_forward"): {"default", "always", "never"},
    ("parallelism", "pipeline_parallel_schedule"): {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
                                                    "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"},
    ("parallelism", "expert_parallel_comm_backend"): {"standard", "deepep"},
    ("activation_checkpoint", "mode"): {"selective", "full", "memory_budget", "none"},
    ("training", "mixed_precision_param"): {"bfloat16", "float32"},
    ("quantize.linear.float8", "recipe_name"): {"tensorwise", "rowwise", "rowwise_with_gw_hp"},
    ("optimizer", "name"): {"Adam", "AdamW"},
}
LISTED_VALUES = {("model", "converters"): {"quantize.linear.float8"}, ("compile", "components"): {"model", "loss"}}
LLAMA_CHUNKS = ("embed", "h0.norm1")  # tiny-llama's 2 transformer layers: the embedding alone, then both

CASES = {
    "tiny-llama tensor 2 sp fsdp": dict(name="tiny-llama", tensor=2, sp=True, zero=3, precision="bf16"),
    "tiny-llama zero 2 fp8 full overlap all": dict(name="tiny-llama", tensor=2, sp=True, zero=2, precision="fp8",
                                                   recompute="full", overlap="all"),
    "tiny-llama ddp": dict(name="tiny-llama", precision="fp32"),
    "tiny-llama pipeline uneven": dict(name="tiny-llama", devices=8, batch=16, stages=2, micro=4, zero=3,
                                       firsts=LLAMA_CHUNKS),
    "tiny-llama gpipe context 2": dict(name="tiny-llama", devices=8, batch=16, stages=2, micro=2, schedule="gpipe",
                                       context=2, zero=3, firsts=("embed", "h1.norm1")),
    "llama2-7b interleaved": dict(name="llama2-7b", devices=8, batch=16, stages=2, micro=4, schedule="interleaved",
                                  chunks=2, zero=3, firsts=("embed", "layers8.norm1", "layers16.norm1",
                                                            "layers24.norm1")),
    "mixtral expert 8 flex": dict(name="mixtral-8x7b", devices=16, batch=32, expert=8, zero=3, precision="bf16",
                                  moe_dispatch="flex"),
    "qwen3 expert folded over tensor": dict(name="qwen3-30b-a3b", devices=16, batch=32, tensor=2, sp=True,
                                            expert=16, zero=3, precision="bf16"),
    "llama3-8b accumulation": dict(name="llama3-8b", devices=8, batch=64, micro=4, zero=3, precision="bf16"),
}


def config(name: str, **kwargs) -> dict:
    kwargs.setdefault("optimizer", "adam")
    return torchtitan_config(*make(name, **kwargs))


def refusal(name: str, **kwargs) -> DnnplanError:
    with pytest.raises(DnnplanError) as err:
        config(name, **kwargs)
    return err.value


@pytest.mark.parametrize("case", CASES)
def test_every_key_and_value_is_one_torchtitan_reads(case):
    kwargs = dict(CASES[case])
    got = config(kwargs.pop("name"), **kwargs)
    for section, keys in got.items():
        assert section in TORCHTITAN_KEYS, section
        assert set(keys) <= TORCHTITAN_KEYS[section], (section, set(keys) - TORCHTITAN_KEYS[section])
        for key, value in keys.items():
            if (section, key) in TORCHTITAN_VALUES:
                assert value in TORCHTITAN_VALUES[section, key], (section, key, value)
            if (section, key) in LISTED_VALUES:
                assert set(value) <= LISTED_VALUES[section, key], (section, key, value)
    assert "v0.2.2" in TORCHTITAN_SOURCE and "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce" in TORCHTITAN_SOURCE


def test_fsdp_with_tensor_parallelism_takes_its_degrees_and_batch():
    got = config("tiny-llama", devices=8, batch=16, tensor=2, sp=True, zero=3, precision="bf16")
    par = got["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"],
            par["tensor_parallel_degree"]) == (1, 4, 2)
    assert par["fsdp_reshard_after_forward"] == "always"
    assert (got["training"]["local_batch_size"], got["training"]["global_batch_size"]) == (4, 16)
    assert got["training"]["mixed_precision_param"] == "bfloat16" and got["training"]["seq_len"] == 16
    assert got["activation_checkpoint"] == {"mode": "none"} and got["compile"] == {"enable": False}
    assert got["optimizer"] == {"name": "AdamW"}


def test_zero_stages_are_ddp_or_fsdp():
    ddp = config("tiny-llama", devices=4)["parallelism"]
    assert (ddp["data_parallel_replicate_degree"], ddp["data_parallel_shard_degree"]) == (4, 1)
    assert "fsdp_reshard_after_forward" not in ddp
    assert config("tiny-llama", zero=2)["parallelism"]["fsdp_reshard_after_forward"] == "never"
    assert "ZeRO-1" in refusal("tiny-llama", zero=1).bare
    assert "DDP" in refusal("tiny-llama", tensor=2, sp=True, zero=0).bare


def test_a_pipeline_names_its_cut_schedule_and_micro_batches():
    got = config("tiny-llama", devices=8, batch=16, stages=2, micro=4, zero=3, firsts=LLAMA_CHUNKS)
    par = got["parallelism"]
    assert par["pipeline_parallel_degree"] == 2 and par["pipeline_parallel_schedule"] == "1F1B"
    assert par["module_fqns_per_model_part"] == [["tok_embeddings"], ["layers.0", "layers.1", "norm", "output"]]
    # 16 samples over 4 data-parallel ranks: 4 a rank, in 4 micro-batches of 1
    assert (got["training"]["local_batch_size"], par["pipeline_parallel_microbatch_size"]) == (4, 1)
    interleaved = config("llama2-7b", devices=8, batch=16, stages=2, micro=4, schedule="interleaved", chunks=2,
                         zero=3, firsts=("embed", "layers8.norm1", "layers16.norm1", "layers24.norm1"))["parallelism"]
    assert interleaved["pipeline_parallel_schedule"] == "Interleaved1F1B"
    parts = interleaved["module_fqns_per_model_part"]
    assert len(parts) == 4 and parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[3][-2:] == ["norm", "output"]
    assert [len(p) for p in parts] == [9, 8, 8, 10]


def test_gradient_accumulation_is_the_global_batch_over_the_local_one():
    got = config("tiny-llama", devices=4, batch=16, micro=2, zero=3)
    assert (got["training"]["local_batch_size"], got["training"]["global_batch_size"]) == (2, 16)
    assert got["parallelism"]["pipeline_parallel_degree"] == 1
    assert "pipeline_parallel_microbatch_size" not in got["parallelism"]


def test_experts_fp8_and_overlap():
    moe = config("mixtral-8x7b", devices=16, batch=32, expert=8, zero=3, precision="bf16", moe_dispatch="flex")
    par = moe["parallelism"]
    assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == (8, 1)
    assert par["expert_parallel_comm_backend"] == "deepep"
    folded = config("qwen3-30b-a3b", devices=16, batch=32, tensor=2, sp=True, expert=16, zero=3, precision="bf16")
    assert folded["parallelism"]["expert_tensor_parallel_degree"] == 1
    assert "expert_parallel_comm_backend" not in folded["parallelism"]  # all-to-all, torchtitan's default
    assert folded["model"] == {"name": "qwen3", "flavor": "30B-A3B"}
    fp8 = config("tiny-llama", tensor=2, sp=True, zero=3, precision="fp8", overlap="all")
    assert fp8["model"]["converters"] == ["quantize.linear.float8"]
    assert fp8["quantize.linear.float8"] == {"recipe_name": "tensorwise", "filter_fqns": ["output"]}
    assert fp8["parallelism"]["enable_async_tensor_parallel"] is True
    assert fp8["compile"] == {"enable": True, "components": ["model", "loss"]}  # async TP needs the model compiled
    assert config("tiny-llama", zero=3, recompute="full")["activation_checkpoint"] == {"mode": "full"}


def test_fp8_on_a_mixture_of_experts_is_refused_naming_its_first_experts_layer():
    """torchtitan's float8 converter leaves the experts' grouped GEMMs in bf16, where dnnplan's fp8
    runs them in FP8: the file would train slower than the plan says."""
    with pytest.raises(DnnplanError, match="experts' grouped GEMMs stay in bf16") as err:
        config("qwen3-30b-a3b", devices=16, batch=32, expert=16, zero=3, precision="fp8")
    assert err.value.layer is not None and "moe" in err.value.layer and "Megatron-LM" in err.value.hint


def test_a_shipped_flavor_or_the_one_to_register():
    assert config("llama3-8b", devices=8, batch=16, zero=3)["model"] == {"name": "llama3", "flavor": "8B"}
    assert flavor_note(make("llama3.1-405b", devices=64)[1]) is None
    note = flavor_note(make("tiny-llama")[1])
    assert "torchtitan/models/llama3/__init__.py" in note and "dim=32" in note and "n_layers=2" in note


def test_the_flavor_to_register_states_a_rotary_base_its_arguments_do_not_default_to():
    """v0.2.2's llama3 TransformerModelArgs defaults rope_theta to 10000 and Qwen3ModelArgs to 1000000
    (torchtitan/models/{llama3,qwen3}/model/args.py): a network's other base is stated, as theirs."""
    net = make("tiny-llama")[1]
    assert "rope_theta" not in flavor_note(net)
    assert "rope_theta=500000" in flavor_note(net.with_param("attention", "rotary_base", 500000.0))
    assert "rope_theta" not in flavor_note(make("mixtral-8x7b", devices=8)[1])  # 1e6: Qwen3ModelArgs' own


def test_the_rotary_scaling_torchtitans_llama3_arguments_apply_is_stated_where_the_network_differs():
    """v0.2.2's llama3 TransformerModelArgs scale the rotary frequencies as Llama 3.1 (RoPEScalingArgs,
    factor 8, applied by precompute_freqs_cis in every flavor; factor 1 scales nothing): Llama 3's
    shipped flavors say the model differs, a flavor to register states the network's factor, and
    Qwen3ModelArgs, which scales nothing, says what it leaves out."""
    note = flavor_note(make("llama3-8b")[1])
    assert "flavor 8B scales the rotary frequencies as Llama 3.1" in note and "where llama3-8b does not" in note
    assert "where llama3-8b scales by 32" in flavor_note(make("llama3-8b")[1].with_param("attention", "rope_scaling",
                                                                                      32.0))
    tiny = make("tiny-llama")[1]
    assert "rope_scaling_args=RoPEScalingArgs(scaling_factor=1)" in flavor_note(tiny)
    assert "rope_scaling_args" not in flavor_note(tiny.with_param("attention", "rope_scaling", 8.0))
    assert "scaling_factor=32" in flavor_note(tiny.with_param("attention", "rope_scaling", 32.0))
    moe = make("mixtral-8x7b", devices=8)[1]
    assert "scales no rotary" not in flavor_note(moe)
    scaled = moe.with_param("attention", "rope_scaling", 8.0)
    assert "Qwen3ModelArgs scales no rotary frequencies" in flavor_note(scaled)


def test_a_mixture_of_experts_registers_as_qwen3_args_with_moe_args():
    """torchtitan v0.2.2's Qwen3ModelArgs (torchtitan/models/qwen3/model/args.py) holds the experts'
    width as moe_inter_dim and their count and top-k in moe_args=MoEArgs(...) (torchtitan/models/moe/
    moe.py), defaults qk_norm to True and head_dim to 128, and MoEArgs num_shared_experts to 1:
    Mixtral's note states each, as the fields' own names."""
    note = flavor_note(make("mixtral-8x7b", devices=8)[1])
    assert "torchtitan/models/qwen3/__init__.py" in note and "Qwen3ModelArgs(" in note
    for field in ("dim=4096", "n_layers=32", "n_heads=32", "n_kv_heads=8", "head_dim=128", "qk_norm=False",
                  "vocab_size=32000", "moe_enabled=True", "moe_inter_dim=14336",
                  "moe_args=MoEArgs(num_experts=8, num_shared_experts=0, top_k=2"):
        assert field in note, (field, note)
    assert ", num_experts=8" not in note.split("MoEArgs(")[0]  # not a field of the model's arguments
    assert "score_func" in note  # the router is the model's to state: MoEArgs defaults to sigmoid scores
    tiny = flavor_note(make("tiny-moe")[1])
    assert "head_dim=8" in tiny and "moe_inter_dim=32" in tiny and "top_k=2" in tiny


@pytest.mark.parametrize("op, param", [("attention", "qkv_bias"), ("attention", "bias"), ("linear", "bias")])
def test_a_network_with_biases_is_refused_naming_the_layer(op, param):
    """v0.2.2's llama3 and qwen3 models build every linear with bias=False: a network with Qwen2's
    query, key and value biases (or any other) is refused, naming the layer, not trained without them."""
    plan, net = make("tiny-llama", zero=3, optimizer="adam")
    with pytest.raises(DnnplanError) as err:
        torchtitan_config(plan, net.with_param(op, param, True))
    first = next(layer.name for layer in net.layers if layer.op == op)
    assert err.value.layer == first and "with biases: torchtitan's llama-style models have none" in err.value.bare
    assert "--to megatron" in err.value.hint


@pytest.mark.parametrize("kwargs, layer, says", [
    (dict(name="gpt-tiny", zero=3), "embed", "rotary positions"),
    (dict(name="lenet5", zero=3), "conv1", "conv2d"),
    (dict(name="tiny-llama", tensor=2, zero=3), "h0.norm1", "--sequence-parallel"),
    (dict(name="tiny-llama", zero=3, recompute="selective"), "h0.attn", "attention's core"),
    (dict(name="tiny-llama", zero=3, precision="fp16"), None, "fp16"),
    (dict(name="tiny-llama", zero=3, optimizer="momentum"), None, "Adam and AdamW only"),
    (dict(name="tiny-llama", zero=3, overlap="none"), None, "always overlap"),
    (dict(name="tiny-llama", zero=3, overlap="data@50"), None, "50 MiB"),
    (dict(name="tiny-llama", devices=8, batch=16, stages=2, micro=2, zero=3, firsts=("embed", "h0.attn")),
     "h0.attn", "inside transformer layer"),
])
def test_what_torchtitan_cannot_run_is_one_line(kwargs, layer, says):
    kwargs = dict(kwargs)
    err = refusal(kwargs.pop("name"), **kwargs)
    assert err.layer == layer and (says in err.bare or says in (err.hint or "")), (err.layer, err.bare, err.hint)
    assert "\n" not in str(err)


def test_attention_other_than_the_machines_default_is_refused():
    plan, net = make("tiny-llama", zero=3, optimizer="adam", machine="dgx-h100")
    assert torchtitan_config(plan, net)["model"]["name"] == "llama3"  # flash: dgx-h100's default
    unfused = swapped(plan, "h1.attn", algorithm="materialized")
    with pytest.raises(DnnplanError) as err:
        torchtitan_config(unfused, net)
    assert err.value.layer == "h1.attn" and "SDPA" in err.value.bare


def test_a_sequence_torchtitan_cannot_split_is_refused():
    """torchtitan's parallelize asserts seq_len a multiple of tensor x 2 x context (its headtail load
    balance and SequenceParallel): tiny-llama's 16 positions under context 3 are refused naming the
    attention layer and the fix, and under --nearest too; tensor 2 with context 2 (8) runs; at
    tensor and context 1 an odd sequence is refused."""
    err = refusal("tiny-llama", devices=6, batch=6, context=3, zero=3)
    assert err.layer == "h0.attn" and "tensor x 2 x context = 6" in err.bare and "divides 16" in err.hint
    plan, net = make("tiny-llama", devices=6, batch=6, context=3, zero=1, optimizer="adam", machine="dgx-h100")
    with pytest.raises(DnnplanError, match="under the layout most transformer layers take") as got:
        nearest_plan(plan, net, "torchtitan", load_machine("dgx-h100"))
    assert got.value.layer == "h0.attn" and "tensor x 2 x context = 6" in got.value.bare
    assert config("tiny-llama", devices=8, batch=8, tensor=2, sp=True, context=2,
                  zero=3)["parallelism"]["context_parallel_degree"] == 2
    with pytest.raises(DnnplanError, match="= 2"):
        check_sequence(load_network("tiny-llama", 15), TORCHTITAN, 1, 1, False)
