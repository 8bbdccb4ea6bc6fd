"""Megatron-LM's arguments read back (planner.launch_import): a plan exported as Megatron's arguments
and read again is the same plan (every layer's strategy and algorithm, the pipeline's cut, the
training choices); the world size comes from torchrun's line; every mistake is one line naming the
option and the file. How the script's shell words are read: test_launch_script_shell.py."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from costmodel.calls.algorithms import resolve_algorithm
from costmodel.machine.loading import load_machine
from networks.errors import DnnplanError
from networks.loader import load_network, zoo_names
from planner.export.megatron import megatron_args
from planner.export.megatron_model import gpt_shape
from planner.launch_import import megatron, megatron_options
from planner.launch_import.formats import format_of, read_launch
from planner.launch_import.shell_words import launch_command
from planner.launch_import.to_plan import launch_plan
from planner.launch_import.trained_network import compared, network_ref, shape_difference, zoo_network_of
from tests.unit.planner.export.test_export_megatron import CASES, MEGATRON_FLAGS, make

MACHINE = load_machine("dgx-a100")
#: the arguments of a small GPT (2 layers of 64) that the tests add options to
SMALL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1"


def script(args: list[str], devices: int) -> str:
    return f"torchrun --nnodes 1 --nproc-per-node {devices} pretrain_gpt.py " + shlex.join(args) + "\n"


def test_every_flag_the_exporter_writes_is_read():
    not_read = {"--ckpt-format", "--max-position-embeddings", "--qk-layernorm", "--moe-grouped-gemm",
                "--disable-bias-linear", "--add-qkv-bias", "--attention-dropout", "--hidden-dropout", "--norm-epsilon",
                "--rotary-base", "--use-rope-scaling", "--rope-scaling-factor"}
    assert set(MEGATRON_FLAGS) - not_read <= set(megatron_options.READ)
    assert not_read <= set(megatron_options.REASON_OF)


@pytest.mark.parametrize("case", CASES)
def test_a_plan_exported_and_read_back_is_the_same_plan(case):
    kwargs = dict(CASES[case])
    kwargs.setdefault("overlap", "data")  # as a plan records the overlap it was priced with
    plan, net = make(kwargs.pop("name"), **kwargs)
    config = megatron.read(script(megatron_args(plan, net), plan.devices), "launch.sh")
    assert config.devices == plan.devices and config.devices_from == f"torchrun --nnodes 1 x --nproc-per-node " \
                                                                      f"{plan.devices}"
    back = launch_plan(config, net, plan.network, plan.devices, MACHINE)
    assert back.strategies() == plan.strategies()
    layers = {layer.name: layer for layer in net.layers}
    resolved = {name: resolve_algorithm(layers[name], plan.algorithms().get(name, ""), MACHINE) for name in layers}
    assert {name: resolve_algorithm(layers[name], alg, MACHINE) for name, alg in back.algorithms().items()} == \
        {name: alg for name, alg in resolved.items() if alg}
    assert (back.pipeline is None) == (plan.pipeline is None) and back.pipeline == plan.pipeline
    for name in ("precision", "optimizer", "zero", "overlap", "moe_dispatch"):
        assert getattr(back.choices, name) == getattr(plan.choices, name), name
    assert back.batch == plan.batch and back.devices == plan.devices


def test_materialized_attention_comes_back():
    plan, net = make("gpt-tiny", overlap="data")
    for name in ("h0.attn", "h1.attn"):
        plan = dataclasses.replace(plan, layers=tuple(dataclasses.replace(lp, algorithm="materialized")
                                                      if lp.name == name else lp for lp in plan.layers))
    config = megatron.read(script(megatron_args(plan, net), plan.devices), "launch.sh")
    assert config.choices.attention == "materialized"
    back = launch_plan(config, net, plan.network, plan.devices, MACHINE)
    assert back.algorithms() == plan.algorithms()


def test_the_arguments_alone_state_no_world_size():
    config = megatron.read("--num-layers 2 --hidden-size 64 --num-attention-heads 4\n--seq-length 32 "
                           "--micro-batch-size 2\n", "args.txt")
    assert config.devices is None and config.batch is None and config.devices_from == "the file states no launcher"
    assert config.choices.precision == "fp32" and config.choices.optimizer == "adam" and config.choices.zero == 0
    assert config.choices.overlap == "none"  # Megatron-LM overlaps nothing unless asked


def test_a_variable_the_file_does_not_set_leaves_the_world_size_unstated():
    words = launch_command('torchrun --nnodes "$NNODES" --nproc-per-node 8 pretrain_gpt.py --num-layers 2', "x.sh")
    assert [w.text for w in words.launcher] == ["torchrun", "--nnodes", "$NNODES", "--nproc-per-node", "8"]
    assert words.launcher[2].unresolved == "$NNODES, which the file does not set" and words.script == "pretrain_gpt.py"
    config = megatron.read('torchrun --nnodes "$NNODES" --nproc-per-node 8 pretrain_gpt.py --num-layers 2 '
                           "--hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1", "x.sh")
    assert config.devices is None and "$NNODES" in config.devices_from


@pytest.mark.parametrize("launcher, devices", [
    ("torchrun --nnodes 2:2 --nproc_per_node=8", 16), ("python -m torch.distributed.run --nproc-per-node 4", 4),
    ("torchrun", 1), ("torchrun --nnodes 1:4 --nproc-per-node 8", None), ("torchrun --nproc-per-node gpu", None),
    ("python", None),
    ("torchrun --nproc-per-node ²", None)])  # a superscript digit is no count (it ended in an internal error)
def test_the_world_size_from_torchruns_line(launcher, devices):
    config = megatron.read(f"{launcher} pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                           "--seq-length 32 --micro-batch-size 1", "run.sh")
    assert config.devices == devices, config.devices_from


def test_pipeline_options_give_each_chunks_layers():
    base = "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 "
    uneven = megatron.read(base + "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|(tt)*3,tL'",
                           "a")
    assert (uneven.stages, uneven.chunks, uneven.chunk_layers) == (2, 1, (1, 7))
    virtual = megatron.read(base + "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2", "a")
    assert (virtual.stages, virtual.chunks, virtual.chunk_layers, virtual.schedule) == (2, 2, None, "interleaved")
    accounted = megatron.read(base + "--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split "
                              "--account-for-loss-in-pipeline-split", "a")
    assert accounted.chunk_layers == (4, 4)  # 8 layers + the embedding + the loss, 5 slots a stage
    first = megatron.read(base + "--pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 2", "a")
    assert first.chunk_layers == (2, 3, 3)


@pytest.mark.parametrize("extra, option, words", [
    ("--no-such-option 3", "--no-such-option", "unknown option"),
    ("--fp16 --bf16", "--fp16", "and --bf16 together"),
    ("--tensor-model-parallel-size 3", "--tensor-model-parallel-size", "does not divide the 4 attention heads"),
    ("--global-batch-size", "--global-batch-size", "needs a value"),
    ("--global-batch-size 8x", "--global-batch-size", "takes an integer"),
    ("--global-batch-size 0", "--global-batch-size", "must be at least 1, got 0"),
    ("--group-query-attention --num-query-groups -2", "--num-query-groups", "must be at least 1, got -2"),
    ("--recompute-granularity partial", "--recompute-granularity", "unknown value 'partial'"),
    ("--tp-comm-overlap --tensor-model-parallel-size 2 --overlap-grad-reduce", "--tp-comm-overlap",
     "needs --sequence-parallel"),
    ("--pipeline-model-parallel-size 3", "--pipeline-model-parallel-size", "do not split 2 layers evenly"),
    ("--optimizer muon", "--optimizer", "muon is not priced"),
    ("--recompute-granularity selective --recompute-method block", "--recompute-method", "Megatron-LM refuses it"),
    ("--hidden-size 128", "--hidden-size", "given twice"),
    ("--seq-length $SEQ", "--seq-length", "uses $SEQ, which the file does not set"),
    ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 5", "--decoder-first-pipeline-num-layers",
     "5 is more than the 2 layers the model has (--num-layers)"),
    ("--num-experts 4", "--moe-token-dispatcher-type", "allgather (Megatron-LM's default) is not priced"),
    ("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|tLm'", "--pipeline-model-parallel-layout",
     "has 'm'"),
    ("--context-parallel-size 2 --cp-comm-type a2a", "--cp-comm-type",
     "'a2a': dnnplan prices context parallelism's ring exchange"),
    ("--use-megatron-fsdp --use-distributed-optimizer --megatron-fsdp-version 2", "--use-megatron-fsdp",
     "Megatron-LM refuses it"),
    ("--use-megatron-fsdp --megatron-fsdp-version 3", "--megatron-fsdp-version", "Megatron-LM takes 1 or 2"),
])
def test_mistakes_are_one_line_naming_the_option_and_the_file(extra, option, words):
    text = ("torchrun --nproc-per-node 8 pretrain_gpt.py \\\n --num-layers 2 --hidden-size 64 \\\n"
            f" --num-attention-heads 4 --seq-length 32 --micro-batch-size 1 {extra}\n")
    with pytest.raises(DnnplanError) as err:
        megatron.read(text, "bad.sh")
    message = str(err.value)
    assert option in message and words in message, message
    assert message.startswith("bad.sh:3: " if option in extra else "bad.sh: "), message  # the option's own line
    assert "\n" not in message


def test_a_script_that_runs_no_training_command_is_refused():
    with pytest.raises(DnnplanError, match="no training command"):
        launch_command("echo hello\nls\n", "x.sh")
    with pytest.raises(DnnplanError, match="runs 2 Python scripts"):
        launch_command("python prep.py --a 1\npython train.py --b 2\n", "x.sh")


def test_formats_by_suffix():
    assert format_of("run.sh") == "megatron" and format_of("args") == "megatron"
    assert format_of("job.TOML") == "torchtitan" and format_of("ds.json") == "deepspeed"
    with pytest.raises(DnnplanError, match="neither train_batch_size nor train_micro_batch_size_per_gpu"):  # DeepSpeed reads it
        read_launch("{}", "ds_config.json")


def test_a_file_whose_suffix_says_nothing_is_read_by_what_it_holds():
    """A torchtitan TOML saved under another suffix, and the DeepSpeed script `dnnplan export --to
    deepspeed` prints (its JSON written by a here-document before the launcher), are read as such."""
    assert format_of("job.cfg", "[parallelism]\ntensor_parallel_degree = 2\n") == "torchtitan"
    script = ("# dnnplan\ncat > ds_config.json <<'EOF'\n{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 2,"
              " \"gradient_accumulation_steps\": 1, \"bf16\": {\"enabled\": true}, \"zero_optimization\": "
              "{\"stage\": 2}}\nEOF\ndeepspeed --num_gpus 8 --num_nodes 2 train.py --deepspeed --deepspeed_config "
              "ds_config.json\n")
    assert format_of("ds.sh", script) == "deepspeed script"
    got = read_launch(script, "ds.sh")
    assert got.framework == "deepspeed" and got.devices == 16 and got.choices.zero == 2
    assert format_of("run.sh", "torchrun pretrain_gpt.py --tensor-model-parallel-size 2\n") == "megatron"


def test_the_network_is_found_by_its_shape_and_checked():
    config = megatron.read("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
                           "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm "
                           "--position-embedding-type rope --untie-embeddings-and-output-weights --seq-length 8192 "
                           "--micro-batch-size 1", "llama.sh")
    assert zoo_network_of(config.shape) == "llama3-8b"
    why = shape_difference(config.shape, load_network("llama2-7b"))
    assert why == "the file states key/value heads 8, and llama2-7b has 32"
    with pytest.raises(DnnplanError, match="no zoo network has the shape"):
        network_ref(megatron.read("--num-layers 3 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                                  "--micro-batch-size 1", "odd.sh"), None)


def test_the_zoo_transformers_differ_in_shape():
    """What finding a zoo network by the shape a file states relies on: no two share one."""
    shapes = {}
    for name in zoo_names():
        net = load_network(name)
        if any(layer.op == "attention" for layer in net.layers):
            shapes.setdefault(tuple(compared(gpt_shape(net)).items()), []).append(name)
    assert len(shapes) >= 10 and all(len(names) == 1 for names in shapes.values()), shapes


def test_the_405b_launch_script_is_read_as_written():
    path = "tests/assets/launch/llama3.1-405b.sh"
    config = megatron.read(open(path).read(), path)
    assert (config.devices, config.tensor, config.sequence_parallel, config.stages, config.chunks) == \
        (2048, 8, True, 16, 1)
    assert config.chunk_layers == (7,) + (8,) * 14 + (7,)  # 126 layers, the embedding and the loss 8 a stage
    assert (config.batch, config.micro_batch, config.recompute) == (2048, 1, "selective")
    assert (config.choices.precision, config.choices.zero, config.choices.overlap) == ("bf16", 1, "data")
    assert len(config.ignored) == 24 and config.schedule == "1f1b" and network_ref(config, None) == "llama3.1-405b"


def test_the_local_implementation_materialises_attentions_scores():
    """``--transformer-impl local`` builds Megatron-Core's DotProductAttention, which materialises the
    scores (megatron/core/models/backends.py LocalSpecProvider.core_attention at d98e8a64), whatever
    --attention-backend says; Transformer Engine's (the default) keeps the backend's kernels."""
    local = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --transformer-impl local "
                          "--attention-backend flash\n", "local.sh")
    te = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --transformer-impl transformer_engine "
                       "--attention-backend flash\n", "te.sh")
    assert (local.choices.attention, te.choices.attention) == ("materialized", "flash")
    # read, not listed as ignored (it changes the step); the backend it overrides is
    assert not any(i.option == "--transformer-impl" for i in local.ignored)
    assert any(i.option == "--attention-backend" and "DotProductAttention" in i.reason for i in local.ignored)


def test_megatron_fsdp_v1_runs_with_the_distributed_optimizer():
    """Megatron-FSDP v1 (the default) requires the distributed optimizer and turns it on where it is
    not given (megatron/training/arguments.py validate_args at d98e8a64): NVIDIA's
    examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh passes both."""
    both = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --use-megatron-fsdp "
                         "--use-distributed-optimizer\n", "fsdp.sh")
    alone = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --use-megatron-fsdp\n", "fsdp.sh")
    assert both.choices.zero == alone.choices.zero == 3


@pytest.mark.parametrize("extra, grad_fp32, ignored", [
    ("--bf16", True, None),  # validate_args at d98e8a64: accumulate_allreduce_grads_in_fp32 under bf16
    ("--bf16 --grad-reduce-in-bf16", False, None),
    ("--bf16 --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32", False,
     "--accumulate-allreduce-grads-in-fp32"),
    ("--bf16 --fp8-format hybrid", True, None),
    ("--fp16", False, None),  # under fp16 only when asked
    ("--fp16 --accumulate-allreduce-grads-in-fp32", True, None),
    ("--fp16 --grad-reduce-in-bf16", False, "--grad-reduce-in-bf16"),
    ("--grad-reduce-in-bf16", False, "--grad-reduce-in-bf16"),  # float32 weights
])
def test_megatron_gradients_precision_is_read_as_megatron_sets_it(extra, grad_fp32, ignored):
    """The gradients' precision as Megatron-LM derives it from --bf16, --fp16, --grad-reduce-in-bf16 and
    --accumulate-allreduce-grads-in-fp32; an option that changes nothing listed as ignored."""
    got = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} {extra}\n", "run.sh")
    assert got.choices.grad_fp32 is grad_fp32
    assert (got.choices.sharded_optimizer.grad_bytes == 4) is grad_fp32
    assert [i.option for i in got.ignored if "grad" in i.option] == ([ignored] if ignored else [])


def test_fp8_parameters_under_megatron_fsdp_without_sharding_are_read():
    """Megatron-LM takes --fp8-param-gather with Megatron-FSDP, whatever its sharding (arguments.py)."""
    got = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} --bf16 --fp8-format hybrid "
                        "--use-megatron-fsdp --data-parallel-sharding-strategy no_shard --fp8-param-gather\n", "f.sh")
    assert got.choices.fp8_params and got.choices.zero == 0


def test_a_world_size_past_what_dnnplan_plans_for_names_the_file():
    with pytest.raises(DnnplanError, match=r"big.sh:1: torchrun's --nnodes 1 x --nproc-per-node 99999999999 is more "
                                           r"devices than dnnplan plans for"):
        megatron.read(f"torchrun --nproc_per_node=99999999999 pretrain_gpt.py {SMALL}\n", "big.sh")


@pytest.mark.parametrize("script, trains", [("pretrain_bert.py", "BERT"), ("pretrain_t5.py", "T5"),
                                            ("../../pretrain_mamba.py", "Mamba"), ("pretrain_hybrid.py", "Mamba"),
                                            ("pretrain_vlm.py", "vision-language"), ("pretrain_retro.py", "RETRO"),
                                            ("pretrain_ict.py", "ICT"), ("pretrain_vision_dino.py", "vision"),
                                            ("train_rl.py", "reinforcement learning")])
def test_megatron_entry_points_of_other_models_are_refused(script, trains):
    with pytest.raises(DnnplanError) as err:
        megatron.read(f"A=1\ntorchrun --nproc-per-node 8 {script} {SMALL}\n", "other.sh")
    message = str(err.value)
    assert message.startswith(f"other.sh:2: '{script}' trains ") and trains in message, message
    assert "not a GPT-style decoder" in message and "\n" not in message


def test_the_script_read_is_stated():
    assert megatron.read(f"torchrun pretrain_gpt.py {SMALL}", "a.sh").script == "pretrain_gpt.py"
    assert megatron.read(f"torchrun /opt/megatron/pretrain_gpt.py {SMALL}", "a.sh").script == \
        "/opt/megatron/pretrain_gpt.py"
    assert megatron.read(f"torchrun train.py {SMALL}", "a.sh").script == "train.py, read as pretrain_gpt.py's arguments"
    assert megatron.read(SMALL, "args.txt").script is None


def test_the_experts_tensor_size_on_a_dense_model_is_refused_as_the_expert_size_is():
    for option in ("--expert-model-parallel-size 2", "--expert-tensor-parallel-size 2"):
        with pytest.raises(DnnplanError) as err:
            megatron.read(f"torchrun pretrain_gpt.py {SMALL} {option}", "dense.sh")
        assert f"{option.split()[0]}: 2 experts' split without --num-experts" in str(err.value), str(err.value)
    same = megatron.read(f"torchrun pretrain_gpt.py {SMALL} --tensor-model-parallel-size 2 "
                         "--expert-tensor-parallel-size 2", "dense.sh")
    assert {i.option: i.reason for i in same.ignored}["--expert-tensor-parallel-size"] == \
        "no mixture of experts (--num-experts)"


def test_a_dense_file_against_a_mixture_of_experts_says_no_experts():
    moe = load_network("tiny-moe")
    dense = dataclasses.replace(gpt_shape(moe), experts=None, top_k=None)
    assert shape_difference(dense, moe) == f"the file states no experts (a dense model), and tiny-moe has " \
                                           f"{gpt_shape(moe).experts}"
    plain = dataclasses.replace(gpt_shape(moe), rmsnorm=not gpt_shape(moe).rmsnorm)
    assert shape_difference(plain, moe) in ("the file states RMSNorm, and tiny-moe has none",
                                            "the file states no RMSNorm, and tiny-moe has one")


def test_a_deepspeed_config_without_network_says_it_names_no_model():
    config = read_launch('{"train_micro_batch_size_per_gpu": 2}', "ds.json")
    with pytest.raises(DnnplanError, match="ds.json: the file names no model and states no model shape") as err:
        network_ref(config, None)
    assert "give --network" in err.value.hint


def test_a_json_object_is_a_deepspeed_config_whatever_its_name_and_a_plan_is_named_as_one():
    text = '{\n  "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1\n}\n'
    assert format_of("ds_config", text) == "deepspeed" and read_launch(text, "ds_config").devices == 8
    for plan in ("version: 1\nnetwork: tiny-gqa\nnetwork_hash: 00329784d732da5c\nbatch: 8\n",
                 '{"version": 1, "network": "tiny-gqa", "network_hash": "00329784d732da5c"}'):
        for path in ("plan.yaml", "plan.json", "plan"):
            with pytest.raises(DnnplanError) as err:
                read_launch(plan, path)
            assert str(err.value) == f"{path}: a dnnplan plan (`dnnplan plan --out`), not a framework's launch " \
                                     f"configuration (predict it with `dnnplan predict {path}`)"


def test_a_sequence_the_files_context_cannot_split_is_refused_as_exporting_refuses_it():
    """Megatron-Core splits a sequence into 2 x CP chunks (planner.export.megatron_layout's
    ``megatron_sequence_splits``): gpt-tiny's 32 positions under context 2 read back, under context
    3 (on 12 devices) refused naming the attention layer, as `dnnplan export` refuses such a plan."""
    plan, net = make("gpt-tiny", devices=4, context=2, overlap="data")
    args = megatron_args(plan, net)
    config = megatron.read(script(args, plan.devices), "launch.sh")
    assert launch_plan(config, net, plan.network, plan.devices, MACHINE).strategies() == plan.strategies()
    i = args.index("--context-parallel-size")
    three = megatron.read(script(args[:i + 1] + ["3"] + args[i + 2:], 12), "launch.sh")
    with pytest.raises(DnnplanError, match=r"32 positions are not a multiple of 2 x context = 6") as err:
        launch_plan(three, net, plan.network, 12, MACHINE)
    assert err.value.layer is not None and err.value.file == "launch.sh"


@pytest.mark.parametrize("extra, option, reason", [
    ("--fp8-amax-history-len 1024 --fp8-amax-compute-algo max", "--fp8-amax-history-len", "the FP8 recipe"),
    ("--decoupled-lr 5e-4", "--decoupled-lr", "the learning-rate schedule"),
    ("--tiktoken-pattern v2", "--tiktoken-pattern", "the data and tokenizer"),
    ("--profile-step-start 4 --profile-step-end 6", "--profile-step-start", "logging"),
    # LoggerConfig's fields (training_config.py): NVIDIA's examples/megatron_fsdp script passes --logging-level
    ("--logging-level 20 --log-memory-interval 50", "--logging-level", "logging"),
    ("--no-log-loss-scale-to-tensorboard", "--no-log-loss-scale-to-tensorboard", "logging"),
    ("--init-model-with-meta-device", "--init-model-with-meta-device", "an implementation switch"),
    ("--apply-query-key-layer-scaling", "--apply-query-key-layer-scaling", "a model setting"),
    ("--cp-comm-type p2p", "--cp-comm-type", "no context parallelism"),
    ("--cp-comm-type a2a", "--cp-comm-type", "no context parallelism"),  # no exchange runs: any kind is read
    ("--megatron-fsdp-version 1", "--megatron-fsdp-version", "with --use-megatron-fsdp only"),
])
def test_megatron_options_that_change_no_step_are_listed_as_ignored(extra, option, reason):
    """Options of Megatron-LM's pretrain_gpt.py (arguments.py, or a config dataclass's field, at the
    commit megatron_options names) of the kinds the docs list as not priced: read, listed with the reason."""
    got = megatron.read(f"torchrun --nproc-per-node 8 pretrain_gpt.py {SMALL} {extra}\n", "run.sh")
    assert any(i.option == option and reason in i.reason for i in got.ignored), got.ignored


def test_an_interleaved_batch_not_in_groups_of_the_stages_names_the_file_and_the_batch():
    """Interleaving runs micro-batches in groups of the stages: a global batch that gives 3 micro-batches
    over 2 stages is one line naming the file and a batch that works, not the flags --from refuses."""
    from costmodel.machine.loading import load_machine as machine
    text = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
            "--seq-length 32 --micro-batch-size 1 --pipeline-model-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 1 --global-batch-size 12\n")
    config = megatron.read(text, "vpp.sh")
    net = load_network("gpt-tiny")
    with pytest.raises(DnnplanError, match=r"vpp.sh: the global batch 12 gives 3 micro-batches of 1 on each of 4 "
                                           r"data-parallel ranks, and the interleaved schedule runs them in groups of "
                                           r"the 2 pipeline stages \(give a global batch of 4 x a multiple of 2, e.g. 8\)"):
        launch_plan(config, net, "gpt-tiny", 8, machine("dgx-a100"))
