"""torchtitan's job TOML read back (planner.launch_import.torchtitan): a TOML as users write them
(torchtitan's own llama3_70b.toml layout) and as `dnnplan export` writes them reads to the layout,
batch and choices torchtitan would run; what does not change the step is listed as ignored; every
mistake (an unknown key, a bad type, contradictory or non-dividing degrees, what torchtitan or dnnplan
cannot run) is one line naming the key and the file."""

from __future__ import annotations

import pytest

from networks.errors import DnnplanError
from planner.launch_import.formats import read_launch
from planner.launch_import.torchtitan import read
from planner.launch_import.trained_network import network_ref

#: torchtitan's torchtitan/models/llama3/train_configs/llama3_70b.toml at v0.2.2, its parallelism and
#: activation checkpointing as a user sets them for 64 GPUs (shard 8 x tensor 8), float8 turned on
USERS = """
[job]
dump_folder = "./outputs"
description = "Llama 3 70B training"

[profiling]
enable_profiling = true
profile_freq = 100

[metrics]
log_freq = 10
enable_tensorboard = true

[model]
name = "llama3"
flavor = "70B"
hf_assets_path = "./assets/hf/Llama-3.1-70B"
converters = ["quantize.linear.float8"]

[optimizer]
name = "AdamW"
lr = 1.5e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 200

[training]
local_batch_size = 8
seq_len = 8192
max_norm = 1.0
steps = 1000
dataset = "c4"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 8
tensor_parallel_degree = 8  # 8-way TP
pipeline_parallel_degree = 1
context_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"

[activation_checkpoint]
mode = "full"

[compile]
enable=false
components = ["model", "loss"]

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output"]
"""

PIPELINED = """
[model]
name = "llama3"
flavor = "tiny-llama"
[training]
local_batch_size = 4
global_batch_size = 16
seq_len = 16
[parallelism]
data_parallel_shard_degree = 4
fsdp_reshard_after_forward = "always"
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "1f1b"
pipeline_parallel_microbatch_size = 2
module_fqns_per_model_part = [["tok_embeddings"], ["layers.0", "layers.1", "norm", "output"]]
[activation_checkpoint]
mode = "none"
"""


def test_a_users_toml_reads_to_what_torchtitan_runs():
    got = read_launch(USERS, "llama3_70b.toml")
    assert got.framework == "torchtitan" and got.network == "llama3-70b" and got.shape is None
    assert (got.devices, got.tensor, got.sequence_parallel, got.stages, got.context) == (64, 8, True, 1, 1)
    assert (got.micro_batch, got.batch) == (8, 64)  # 8 a rank over 8 data-parallel ranks
    assert got.recompute == "full"
    c = got.choices
    assert (c.precision, c.optimizer, c.zero, c.overlap, c.seq) == ("fp8", "adam", 3, "data", 8192)
    ignored = {i.option for i in got.ignored}
    assert {"[optimizer] lr", "[training] dataset", "[profiling] profile_freq", "[job] description",
            "[model] hf_assets_path"} <= ignored
    assert "[quantize.linear.float8] filter_fqns" not in ignored  # read: which linear layers run in FP8
    assert {i.option: i.reason for i in got.ignored}["[training] steps"].startswith("how long to train")


def test_a_pipeline_its_cut_and_micro_batches():
    got = read(PIPELINED, "pp.toml")
    assert (got.devices, got.stages, got.chunks, got.chunk_layers, got.schedule) == (8, 2, 1, (0, 2), "1f1b")
    assert (got.micro_batch, got.batch, got.choices.zero) == (2, 16, 3)


def test_without_a_cut_torchtitan_cuts_the_flavors_layers_itself():
    """torchtitan's default cut (the first and last stages a layer short) and its layers-per-stage cut,
    of the flavor's layers (planner.launch_import.torchtitan_cut); tiny-llama has 2."""
    fqns = 'module_fqns_per_model_part = [["tok_embeddings"], ["layers.0", "layers.1", "norm", "output"]]'
    got = read(PIPELINED.replace(fqns, ""), "pp.toml")
    assert (got.stages, got.chunks, got.chunk_layers) == (2, 1, (1, 1))  # (2 + 1 + 1) / 2 = 2 a part, less 1 each
    # one weighed layer a part: ceil((2 + 1 + 1) / 1) = 4 parts, two a rank; the ends hold no transformer layer
    got = read(PIPELINED.replace(fqns, "pipeline_parallel_layers_per_stage = 1").replace('"1f1b"', '"Interleaved1F1B"'),
               "pp.toml")
    assert (got.stages, got.chunks, got.chunk_layers, got.schedule) == (2, 2, (0, 1, 1, 0), "interleaved")


def test_zero_stages_from_the_data_parallel_degrees_and_the_reshard_policy():
    base = "[activation_checkpoint]\nmode = \"none\"\n[parallelism]\n"
    assert read(base + "data_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1\n", "a.toml").choices.zero == 0
    assert read(base + "data_parallel_shard_degree = 8\n", "a.toml").choices.zero == 3
    assert read(base + "data_parallel_shard_degree = 8\nfsdp_reshard_after_forward = \"never\"\n",
                "a.toml").choices.zero == 2
    got = read(base + "data_parallel_shard_degree = -1\n", "a.toml")
    assert got.devices is None and got.choices.zero == 3 and "devices left" in got.devices_from


def line(text: str, path: str = "job.toml") -> DnnplanError:
    with pytest.raises(DnnplanError) as err:
        read(text, path)
    message = str(err.value)
    assert "\n" not in message and path in message, message
    return err.value


def edited(old: str, new: str) -> str:
    assert old in USERS
    return USERS.replace(old, new)


@pytest.mark.parametrize("text, says", [
    # an unknown key, with the one it most likely meant
    (edited("tensor_parallel_degree = 8", "tensor_paralel_degree = 8"), "did you mean [parallelism] tensor_parallel"),
    # an unknown section
    (USERS + "\n[turbo]\nenable = true\n", "[turbo]: unknown section"),
    # a bad type
    (edited("tensor_parallel_degree = 8", "tensor_parallel_degree = \"8\""), "takes an integer, got '8'"),
    (edited("mode = \"full\"", "mode = 1"), "takes a string"),
    # contradictory values
    (edited("data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 2"), "HSDP"),
    (edited("context_parallel_degree = 1", "context_parallel_degree = 1\nenable_async_tensor_parallel = true"),
     "needs [compile] enable"),
    (edited("[parallelism]\ndata_parallel_replicate_degree = 1\ndata_parallel_shard_degree = 8",
            "[parallelism]\ndata_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1"), "DDP"),
    # degrees and batches that do not divide
    (edited("seq_len = 8192", "seq_len = 8192\nglobal_batch_size = 100"), "not a multiple"),
    (PIPELINED.replace("pipeline_parallel_microbatch_size = 2", "pipeline_parallel_microbatch_size = 3"),
     "does not divide local_batch_size 4"),
    (PIPELINED.replace('[["tok_embeddings"], ', '[["tok_embeddings"], [], '), "3 model parts over 2"),
    (edited("context_parallel_degree = 1", "context_parallel_degree = 1\nexpert_parallel_degree = 3"),
     "does not divide shard 8"),
    # what is missing, or left to torchtitan's defaults that dnnplan does not price
    (edited("[activation_checkpoint]\nmode = \"full\"", ""), "(torchtitan's default)"),
    (PIPELINED.replace('module_fqns_per_model_part = [["tok_embeddings"], ["layers.0", "layers.1", "norm", "output"]]',
                       "").replace('flavor = "tiny-llama"', 'flavor = "my-own"'), "which the file's flavor does not "
                                                                                  "give dnnplan"),
    (PIPELINED.replace('module_fqns_per_model_part = [["tok_embeddings"], ["layers.0", "layers.1", "norm", "output"]]',
                       "pipeline_parallel_layers_per_stage = 1"), "2 model parts a rank, and a single-stage schedule"),
    (PIPELINED.replace('"layers.0", "layers.1"', '"layers.1", "layers.0"'), "in order"),
    # what dnnplan does not price
    (edited('converters = ["quantize.linear.float8"]', 'converters = ["quantize.linear.mx"]'), "quantize.linear.mx"),
    (edited('name = "AdamW"', 'name = "Lion"'), "Adam and AdamW"),
    # torchtitan's other way of exchanging a split sequence's keys and values (its default all-gathers)
    (edited("context_parallel_degree = 1",
            "context_parallel_degree = 2\ncontext_parallel_rotate_method = \"alltoall\""),
     "dnnplan prices torchtitan's default, allgather"),
    (edited("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 1\npipeline_parallel_schedule = \"DualPipeV\""),
     "DualPipeV"),
    # torchtitan 0.1's [training] compile, which 0.2 reads as [compile] enable (it was answered "did you mean dtype?")
    (edited("seq_len = 8192", "seq_len = 8192\ncompile = true"), "torchtitan 0.1's key, which 0.2 reads as [compile] enable"),
    # not TOML at all: the line
    (USERS.replace("[metrics]", "[metrics"), "not TOML"),
])
def test_a_bad_config_is_one_line_naming_the_key_and_file(text, says):
    err = line(text)
    assert says in str(err), str(err)


def test_the_line_of_the_key_is_named():
    err = line(edited("tensor_parallel_degree = 8", "tensor_parallel_degree = \"8\""))
    assert err.line == USERS.splitlines().index("tensor_parallel_degree = 8  # 8-way TP") + 1


def test_sub_tables_of_ignored_sections_are_ignored_too():
    got = read(PIPELINED + "[training.dataloader]\nnum_workers = 2\n[validation.dataloader]\nnum_workers = 1\n",
               "pp.toml")
    assert {"[training.dataloader] num_workers", "[validation.dataloader] num_workers"} <= \
        {i.option for i in got.ignored}


def test_compilation_is_listed_as_ignored_with_why():
    """[compile] is read only for what async tensor parallelism needs; the step is priced with the
    cost model's fused kernels either way, so the file's compile keys are listed as not changing it."""
    got = read(PIPELINED + "[compile]\nenable = true\ncomponents = [\"model\"]\n", "pp.toml")
    reasons = {i.option: i.reason for i in got.ignored}
    assert "torch.compile" in reasons["[compile] enable"] and "[compile] components" in reasons
    assert "[compile] enable" not in {i.option for i in read(PIPELINED, "pp.toml").ignored}


def test_an_empty_toml_is_one_line_saying_so():
    for text in ("", "[job]\n", "# a comment\n"):
        assert "without a key" in str(line(text))


def test_a_mistyped_flavor_is_named_with_the_network_it_likely_meant():
    """A flavor the zoo lacks is listed as ignored beside --network; without it, the file's flavor is
    the error (did you mean), not "no network named"."""
    text = "[model]\nname = \"llama3\"\nflavor = \"tiny-lama\"\n[activation_checkpoint]\nmode = \"none\"\n"
    got = read(text, "job.toml")
    reason = {i.option: i.reason for i in got.ignored}["[model] flavor"]
    assert "did you mean tiny-llama?" in reason and got.network is None
    with pytest.raises(DnnplanError, match="flavor: llama3 tiny-lama is not a network dnnplan ships") as err:
        network_ref(got, None)
    assert "fix the flavor" in err.value.hint and network_ref(got, "tiny-llama") == "tiny-llama"


def test_a_key_before_any_section_is_refused_as_torchtitan_refuses_it():
    """torchtitan's ConfigManager refuses a name that is not one of JobConfig's sections."""
    err = line("tensor_parallel_degree = 4\n" + USERS)
    assert err.line == 1 and "tensor_parallel_degree: a key before any section" in str(err)
    assert "move it under [parallelism]" in err.hint
    assert line("# top\nsteps = 3\n" + USERS).line == 2
    assert "a key before any section" in str(line("tensor_parallel_degree = 4\n"))  # alone: not "without a key"


@pytest.mark.parametrize("fqns, says", [
    (None, "[] (torchtitan's default: every linear layer in FP8)"), ("[]", "[]"),
    ('["output", "attention.wq"]', "'attention.wq'"), ('["auto_filter_small_kn"]', "auto_filter_small_kn")])
def test_the_float8_filter_is_what_dnnplan_prices_or_one_line(fqns, says):
    """filter_fqns decides which linear layers run in FP8; dnnplan's fp8 prices the transformer blocks'
    linear layers in FP8 and the output layer in bf16, torchtitan's filter_fqns = ["output"]."""
    old = 'filter_fqns = ["output"]\n'
    assert old in USERS
    text = USERS.replace(old, "" if fqns is None else f"filter_fqns = {fqns}\n")
    err = line(text)
    assert str(err).startswith("job.toml:") and "filter_fqns" in str(err) and says in str(err), str(err)
    assert "the output layer in bf16" in str(err) and 'filter_fqns = ["output"]' in err.hint
    assert err.line == text.splitlines().index(f"filter_fqns = {fqns}" if fqns else
                                                'converters = ["quantize.linear.float8"]') + 1
    plain = read(USERS.replace('converters = ["quantize.linear.float8"]', "").replace(old, 'filter_fqns = []\n'),
                 "job.toml")
    assert plain.choices.precision == "bf16"
    assert {i.option: i.reason for i in plain.ignored}["[quantize.linear.float8] filter_fqns"] == \
        "the float8 converter is not in [model] converters"


def test_pipeline_keys_without_a_pipeline_are_listed_as_ignored():
    got = read(edited("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 1\n"
                      "pipeline_parallel_microbatch_size = 2\npipeline_parallel_schedule = \"GPipe\""), "job.toml")
    reasons = {i.option: i.reason for i in got.ignored}
    assert reasons["[parallelism] pipeline_parallel_microbatch_size"] == "no pipeline (pipeline_parallel_degree 1)"
    assert "[parallelism] pipeline_parallel_schedule" in reasons and got.micro_batch == 8


@pytest.mark.parametrize("old, new, says", [
    ("tensor_parallel_degree = 8  # 8-way TP", "tensor_parallel_degree = 99999999999999999999",
     "[parallelism] tensor_parallel_degree: 99999999999999999999 is more devices than dnnplan plans for"),
    ("seq_len = 8192", "seq_len = -5", "[training] seq_len: must be from 1 to 2^31 tokens, got -5")])
def test_a_value_out_of_range_names_its_key_and_line(old, new, says):
    text = edited(old, new)
    err = line(text)
    assert says in str(err) and err.line == text.splitlines().index(new) + 1, str(err)


def test_the_model_name_and_flavor_left_out_are_torchtitans_defaults():
    """job_config.py's Model: name "llama3", flavor "debugmodel"."""
    assert read(edited('name = "llama3"\n', ""), "job.toml").network == "llama3-70b"
    debug = read(edited('flavor = "70B"\n', ""), "job.toml")
    reason = {i.option: i.reason for i in debug.ignored}["[model] flavor"]
    assert debug.network is None and "llama3 debugmodel (torchtitan's default) is not a network" in reason
    assert "dnnplan ships llama3 8B, llama3 70B, llama3 405B" in reason
    other = read(edited('name = "llama3"', 'name = "llama4"'), "job.toml")
    reason = {i.option: i.reason for i in other.ignored}["[model] flavor"]
    assert "llama4 70B is not a network dnnplan ships (did you mean name = \"llama3\"?)" in reason


def test_fp8_on_a_mixture_of_experts_is_refused_as_exporting_refuses_it():
    """The float8 converter on Qwen3-30B-A3B: torchtitan runs the experts' grouped GEMMs in bf16, which
    dnnplan's fp8 would price in FP8 (planner.export.torchtitan.FP8_EXPERTS)."""
    from costmodel.machine.loading import load_machine  # noqa: PLC0415
    from networks.loader import load_network  # noqa: PLC0415
    from planner.launch_import.to_plan import launch_plan  # noqa: PLC0415

    text = (USERS.replace('name = "llama3"', 'name = "qwen3"').replace('flavor = "70B"', 'flavor = "30B-A3B"')
            .replace("tensor_parallel_degree = 8  # 8-way TP", "tensor_parallel_degree = 1")
            .replace("seq_len = 8192", "seq_len = 4096"))
    config = read(text, "qwen.toml")
    assert config.choices.precision == "fp8"
    net = load_network("qwen3-30b-a3b")
    with pytest.raises(DnnplanError, match="experts' grouped GEMMs stay in bf16") as err:
        launch_plan(config, net, "qwen3-30b-a3b", 8, load_machine("dgx-h100"))
    assert err.value.file == "qwen.toml"
    bf16 = read(text.replace('converters = ["quantize.linear.float8"]', ""), "qwen.toml")
    assert launch_plan(bf16, net, "qwen3-30b-a3b", 8, load_machine("dgx-h100")).choices.precision == "bf16"


def test_an_expert_degree_on_a_network_without_experts_is_refused():
    """expert_parallel_degree above 1 on a dense model: one line naming the file, as Megatron-LM's
    --expert-model-parallel-size without --num-experts is (not a layout line that says expert 2)."""
    from costmodel.machine.loading import load_machine
    from networks.loader import load_network
    from planner.launch_import.to_plan import launch_plan
    config = read_launch(edited("context_parallel_degree = 1", "context_parallel_degree = 1\nexpert_parallel_degree = 2"),
                         "job.toml")
    with pytest.raises(DnnplanError, match=r"job.toml: the file splits experts 2 ways, and llama3-70b has no mixture "
                                           r"of experts \(set expert_parallel_degree = 1 in \[parallelism\]"):
        launch_plan(config, load_network("llama3-70b"), "llama3-70b", 64, load_machine("dgx-h100"))


def test_the_rotate_method_is_read_where_the_sequence_is_split_and_ignored_where_not():
    """context_parallel_rotate_method "allgather" (torchtitan's default) reads under context
    parallelism; without it any method is listed as ignored (no exchange runs)."""
    split = read(edited("context_parallel_degree = 1",
                        "context_parallel_degree = 2\ncontext_parallel_rotate_method = \"allgather\""), "job.toml")
    ignored = [i.option for i in split.ignored]
    assert split.context == 2 and "[parallelism] context_parallel_rotate_method" not in ignored
    whole = read(edited("context_parallel_degree = 1",
                        "context_parallel_degree = 1\ncontext_parallel_rotate_method = \"alltoall\""), "job.toml")
    assert "[parallelism] context_parallel_rotate_method" in [i.option for i in whole.ignored]
