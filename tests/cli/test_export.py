"""`dnnplan export PLAN --to megatron|torchtitan|deepspeed`: the launch command, TOML or JSON printed or
written, its JSON, and every mistake (an unknown framework, a plan the framework cannot run, a missing
plan) one line, exit 2."""

from __future__ import annotations

import json
import os
import tomllib

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from networks.errors import DnnplanError
from dnnplan.render.export import deepspeed_launcher
from tests.support.cli_errors import one_error_line
from tests.support.executor_plans import pipelined_plan, predicted_plan, write_uniform_plan
from tests.support.paths import ZOO

runner = CliRunner()


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    return {"tensor": predicted_plan(folder, "tiny-gqa", 4, tensor=2),
            "pipeline": pipelined_plan(folder, 4, 2, 2, "1f1b"),
            "cnn": write_uniform_plan(folder, "lenet5", 2, 8, "data", machine="dgx-a100"),
            "llama": llama_plan(folder, "--tensor", "2", "--sequence-parallel", "--zero", "3"),
            "data": llama_plan(folder, "--zero", "2")}


def llama_plan(folder, *flags: str) -> str:
    """tiny-llama's plan on 16 H100s in bf16 with Adam: `dnnplan predict ... FLAGS --out`."""
    path = str(folder / f"llama{'-'.join(flags)}.yaml")
    result = runner.invoke(app, ["predict", "tiny-llama", "-p", "16", "-b", "32", "--machine", "dgx-h100",
                                 "--precision", "bf16", "--optimizer", "adam", *flags, "--out", path])
    assert result.exit_code == 0, result.output
    return path


def test_prints_a_shell_ready_command_one_flag_a_line(plans):
    result = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("# dnnplan: predicted step ") and lines[0].endswith(" s on 4 devices of dgx-a100")
    launcher = next(i for i, line in enumerate(lines) if line.startswith("torchrun "))
    assert lines[launcher].endswith("pretrain_gpt.py \\")
    flag_lines = lines[launcher + 1:]
    assert all(line.lstrip().startswith("--") for line in flag_lines)
    assert all(line.endswith(" \\") for line in flag_lines[:-1]) and not flag_lines[-1].endswith("\\")
    assert "    --tensor-model-parallel-size 2 \\" in flag_lines
    assert "    --num-query-groups 2 \\" in flag_lines


def test_a_pipelined_plan(plans):
    result = runner.invoke(app, ["export", plans["pipeline"], "--to", "megatron", "--json"])
    assert result.exit_code == 0, result.output
    args = json.loads(result.output)["args"]
    assert args[args.index("--pipeline-model-parallel-size") + 1] == "2"


def from_its_folder(printed: str, plan: str, out) -> str:
    """The printed file as --out writes it: the plan its second line names from the written file's
    folder (printed, as the command was given it), so that it is found wherever the two are read from."""
    return printed.replace(f"# from {plan} (", f"# from {os.path.relpath(plan, out.parent)} (", 1)


def test_out_writes_the_command_and_json_gives_the_arguments(plans, tmp_path):
    out = tmp_path / "launch.sh"
    printed = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron"]).output
    written = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron", "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text() == from_its_folder(printed, plans["tensor"], out) and f"wrote {out}" in written.output
    again = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron", "--out", str(out)])
    assert "already exists" in one_error_line(again)
    got = runner.invoke(app, ["export", plans["tensor"], "--to", "megatron", "--json"])
    assert got.exit_code == 0, got.output
    data = json.loads(got.output)
    assert data["framework"] == "megatron" and data["args"][:2] == ["--tensor-model-parallel-size", "2"]
    assert all(f"    {a}" in printed for a in data["args"] if a.startswith("--"))


def test_torchtitan_prints_a_toml_torchtitan_reads(plans, tmp_path):
    printed = runner.invoke(app, ["export", plans["llama"], "--to", "torchtitan"])
    assert printed.exit_code == 0, printed.output
    assert printed.output.startswith("# dnnplan: predicted step ") and "torchtitan v0.2.2" in printed.output
    toml = tomllib.loads(printed.output)
    assert toml["parallelism"]["tensor_parallel_degree"] == 2 and toml["parallelism"]["data_parallel_shard_degree"] == 8
    assert toml["model"] == {"name": "llama3", "flavor": "tiny-llama"}
    data = json.loads(runner.invoke(app, ["export", plans["llama"], "--to", "torchtitan", "--json"]).output)
    assert data["framework"] == "torchtitan" and data["config"]["parallelism"] == toml["parallelism"]
    out = tmp_path / "job.toml"
    written = runner.invoke(app, ["export", plans["llama"], "--to", "torchtitan", "--out", str(out)])
    assert written.exit_code == 0 and out.read_text() == from_its_folder(printed.output, plans["llama"], out)
    assert "keys)" in written.output


def test_deepspeed_prints_a_script_and_writes_the_json(plans, tmp_path):
    printed = runner.invoke(app, ["export", plans["data"], "--to", "deepspeed"])
    assert printed.exit_code == 0, printed.output
    lines = printed.output.splitlines()
    assert lines[-1] == "deepspeed --num_gpus 8 --num_nodes 2 train.py --deepspeed --deepspeed_config ds_config.json"
    body = lines[lines.index("cat > ds_config.json <<'EOF'") + 1:lines.index("EOF")]
    config = json.loads("\n".join(body))
    assert config["zero_optimization"]["stage"] == 2 and config["train_batch_size"] == 32
    out = tmp_path / "ds.json"
    written = runner.invoke(app, ["export", plans["data"], "--to", "deepspeed", "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert json.loads(out.read_text()) == config
    assert f"--deepspeed_config {out}" in written.output.splitlines()[-1]


@pytest.mark.parametrize("to, says", [("deepspeed", "set in the script"), ("torchtitan", "rotary positions"),
                                      ("nemo", "unknown --to")])
def test_what_a_framework_cannot_run_is_refused_in_one_line(plans, to, says):
    assert says in one_error_line(runner.invoke(app, ["export", plans["tensor"], "--to", to]))


def test_a_plan_megatron_cannot_run_names_the_file_and_layer(plans):
    line = one_error_line(runner.invoke(app, ["export", plans["cnn"], "--to", "megatron"]))
    assert plans["cnn"].split("/")[-1] in line and "layer 'conv1'" in line


def test_nearest_names_the_framework_asked_for_and_a_cnns_data_parallelism(plans):
    line = one_error_line(runner.invoke(app, ["export", plans["cnn"], "--to", "torchtitan", "--nearest"]))
    assert "torchtitan's llama-style models" in line and "Megatron" not in line


def test_a_missing_plan_is_one_line(tmp_path):
    assert "no such plan file" in one_error_line(runner.invoke(app, ["export", str(tmp_path / "nope.yaml"),
                                                                      "--to", "megatron"]))


def test_help_teaches():
    result = runner.invoke(app, ["export", "--help"])
    assert result.exit_code == 0
    assert "Megatron-LM" in result.output and "--to" in result.output and "dnnplan export plan.yaml --to megatron" in result.output


@pytest.mark.parametrize("plan, to, suffix, extra", [("llama", "torchtitan", "toml", []),
                                                     ("data", "deepspeed", "json", ["--network", "tiny-llama"])])
def test_exported_then_predicted_from_the_file_gives_the_plans_step_and_memory(plans, tmp_path, plan, to, suffix,
                                                                             extra):
    path = tmp_path / f"{to}.{suffix}"
    assert runner.invoke(app, ["export", plans[plan], "--to", to, "--out", str(path)]).exit_code == 0
    want = runner.invoke(app, ["predict", plans[plan], "--json"])
    got = runner.invoke(app, ["predict", "--from", str(path), "--machine", "dgx-h100", *extra, "--json"])
    assert want.exit_code == 0 and got.exit_code == 0, got.output
    want, got = json.loads(want.output), json.loads(got.output)
    assert (got["step_s"], got["memory_allocated_bytes"]) == (want["step_s"], want["memory_peak_bytes"])
    assert got["devices"] == 16 and got["network"] == "tiny-llama"


@pytest.mark.parametrize("to, suffix", [("megatron", "sh"), ("torchtitan", "toml")])
def test_a_file_dnnplan_wrote_is_predicted_on_the_devices_and_machine_its_first_line_names(plans, tmp_path, to,
                                                                                         suffix):
    """No --devices nor --machine: the exported file's dnnplan line names them (Megatron-LM's script
    states no world size, and no launch file names the machine); the flags still decide."""
    path = tmp_path / f"{to}.{suffix}"
    assert runner.invoke(app, ["export", plans["llama"], "--to", to, "--out", str(path)]).exit_code == 0
    assert path.read_text().splitlines()[0].startswith("# dnnplan: predicted step")
    want = json.loads(runner.invoke(app, ["predict", plans["llama"], "--json"]).output)
    got = runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama", "--json"])
    assert got.exit_code == 0, got.output
    got = json.loads(got.output)
    assert (got["machine"], got["machine_from"], got["devices"]) == ("dgx-h100", "the file's dnnplan line", 16)
    assert got["step_s"] == want["step_s"]
    other = json.loads(runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama", "--machine",
                                           "dgx-a100", "--json"]).output)
    assert (other["machine"], other["machine_from"]) == ("dgx-a100", "--machine")
    path.write_text("\n".join(path.read_text().splitlines()[1:]))  # without the line: as before
    bare = runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama", "--devices", "16"])
    assert bare.exit_code == 0 and "assumed, --machine not given: dgx-a100" in " ".join(bare.output.split())


@pytest.mark.parametrize("to, suffix", [("megatron", "sh"), ("torchtitan", "toml"), ("deepspeed", "json")])
def test_a_plan_on_a_machine_yaml_of_ones_own_reads_back_on_it(tmp_path, to, suffix):
    """A machine YAML whose name is no shipped machine's, at a path with a space in it: the file's
    dnnplan line names the path, and reading the file back (or with --machine PATH; DeepSpeed's JSON
    has no comment to hold the line) predicts the plan's step on that machine, not "unknown machine"."""
    from costmodel.machine.loading import _shipped_dir  # noqa: PLC0415
    folder = tmp_path / "my machines"
    folder.mkdir()
    machine = folder / "my h100.yaml"
    machine.write_text(_shipped_dir().joinpath("dgx-h100.yaml").read_text().replace("name: dgx-h100", "name: myh100"))
    plan = str(tmp_path / "plan.yaml")
    made = runner.invoke(app, ["predict", "tiny-llama", "-p", "16", "-b", "32", "--machine", str(machine),
                               "--precision", "bf16", "--optimizer", "adam", "--zero", "2", "--out", plan])
    assert made.exit_code == 0, made.output
    path = tmp_path / f"{to}.{suffix}"
    assert runner.invoke(app, ["export", plan, "--to", to, "--out", str(path)]).exit_code == 0
    want = json.loads(runner.invoke(app, ["predict", plan, "--json"]).output)
    for flags in ([] if to == "deepspeed" else [[]]) + [["--machine", str(machine)]]:
        got = runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama", *flags, "--json"])
        assert got.exit_code == 0, got.output
        got = json.loads(got.output)
        assert (got["machine"], got["devices"], got["step_s"]) == (str(machine), 16, want["step_s"])


def test_a_bad_key_in_a_file_predicted_is_one_line(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("[parallelism]\ntensor_parallel_degre = 2\n")
    line = one_error_line(runner.invoke(app, ["predict", "--from", str(path), "--machine", "dgx-h100"]))
    assert "job.toml:2" in line and "did you mean [parallelism] tensor_parallel_degree" in line


def test_nearest_writes_the_closest_plan_the_framework_runs_and_prints_both_predictions(tmp_path):
    """ZeRO-1 has no torchtitan form: refused, or with --nearest written as FSDP keeping the weights
    gathered (ZeRO-2), the change and both plans' step and memory on stderr; the file read back
    predicts what --nearest printed for it. A plan already expressible is written as it is."""
    plan = llama_plan(tmp_path, "--tensor", "2", "--sequence-parallel", "--zero", "1")
    assert "ZeRO-1" in one_error_line(runner.invoke(app, ["export", plan, "--to", "torchtitan"]))
    job = str(tmp_path / "job.toml")
    result = runner.invoke(app, ["export", plan, "--to", "torchtitan", "--nearest", "--out", job])
    assert result.exit_code == 0, result.output
    err = " ".join(result.stderr.split())
    assert "ZeRO-1 as FSDP keeping the weights gathered" in err and "the plan: step" in err and "the nearest:" in err
    assert tomllib.loads(open(job).read())["parallelism"]["fsdp_reshard_after_forward"] == "never"
    got = json.loads(runner.invoke(app, ["export", plan, "--to", "torchtitan", "--nearest", "--json"]).stdout)
    near, original = got["nearest"]["nearest"], got["nearest"]["original"]
    assert near["memory_peak_bytes"] < original["memory_peak_bytes"]  # the weights' gradients sharded too
    back = json.loads(runner.invoke(app, ["predict", "--from", job, "--devices", "16", "--machine", "dgx-h100",
                                          "--json"]).stdout)
    assert (back["step_s"], back["memory_allocated_bytes"]) == (near["step_s"], near["memory_peak_bytes"])
    same = runner.invoke(app, ["export", plan, "--to", "megatron", "--nearest", "--json"])
    assert json.loads(same.stdout)["nearest"] == {"changes": []}
    assert f"--nearest changes nothing: megatron runs {plan} as it is" in " ".join(same.stderr.split())


def test_plan_emit_prints_the_plans_launch_file_after_it(tmp_path):
    """`dnnplan plan --emit FRAMEWORK`: the plan's summary, then the file `dnnplan export --to` writes
    (its JSON under "export" with --json); a plan the framework cannot run is one line after the
    summary, exit 2; --emit with --sweep or an unknown framework, one line before planning."""
    base = ["plan", "tiny-llama", "-p", "4", "--machine", "dgx-h100", "--precision", "bf16", "--time-limit", "5",
            "--pipeline", "off"]
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, [*base, "--emit", "megatron", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.index("step") < result.stdout.index("pretrain_gpt.py")
    exported = runner.invoke(app, ["export", str(out), "--to", "megatron"]).stdout
    assert result.stdout.endswith(exported)  # the same file `dnnplan export` writes of the plan written
    got = json.loads(runner.invoke(app, [*base, "--emit", "deepspeed", "--json"]).stdout)
    assert got["export"]["framework"] == "deepspeed" and got["export"]["config"]["train_batch_size"] == got["batch"]
    refused = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--time-limit", "5", "--emit", "torchtitan"])
    assert refused.exit_code == 2 and "step" in refused.stdout
    assert "--emit torchtitan:" in refused.stderr and "learned position embeddings" in refused.stderr
    assert "--nearest" not in refused.stderr  # which refuses the same plan: not offered
    as_json = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--time-limit", "5", "--emit", "torchtitan", "--json"])
    assert as_json.exit_code == 2 and "learned position embeddings" in json.loads(as_json.stdout)["export"]["refused"]
    assert "--emit torchtitan:" in as_json.stderr  # the refusal's one line, as without --json
    for args, words in [(["--emit", "foo"], "unknown --emit 'foo'"), (["--sweep", "2,4", "--emit", "megatron"],
                                                                       "--emit prints one plan's launch file")]:
        assert words in one_error_line(runner.invoke(app, ["plan", "tiny-llama", *args]))


def test_plan_emit_nearest_prints_the_plan_the_framework_runs_after_it():
    """--zero 1 asked of a plan emitted for torchtitan, which has no ZeRO-1: without --nearest one line
    points at it; with it the launch file is the nearest plan's (FSDP keeping the weights gathered),
    its changes and both predictions on stderr or under export.nearest, exit 0; --nearest without
    --emit is one line before planning."""
    base = ["plan", "tiny-llama", "-p", "4", "--machine", "dgx-h100", "--precision", "bf16", "--time-limit", "5",
            "--pipeline", "off", "--zero", "1", "--emit", "torchtitan"]
    refused = runner.invoke(app, base)
    assert refused.exit_code == 2 and "as `--emit torchtitan --nearest` prints it after the plan" in \
        " ".join(refused.stderr.split())
    near = runner.invoke(app, [*base, "--nearest"])
    assert near.exit_code == 0, near.output
    assert 'fsdp_reshard_after_forward = "never"' in near.stdout and near.stdout.index("step") < near.stdout.index("[")
    err = " ".join(near.stderr.split())
    assert "ZeRO-1 as FSDP keeping the weights gathered" in err and "the nearest: step" in err
    got = json.loads(runner.invoke(app, [*base, "--nearest", "--json"]).stdout)
    assert got["zero"] == 1 and got["export"]["config"]["parallelism"]["fsdp_reshard_after_forward"] == "never"
    assert any("ZeRO-1 as FSDP" in c for c in got["export"]["nearest"]["changes"])
    assert "--nearest is the nearest plan a framework runs, printed by --emit" in one_error_line(
        runner.invoke(app, ["plan", "tiny-llama", "--nearest"]))


def test_plan_emit_torchtitan_weighs_only_the_zero_stages_torchtitan_runs():
    """torchtitan has no ZeRO-1 (FSDP shards the optimiser state only with the weights): with --emit
    torchtitan and no --zero the planner chooses among ZeRO-0, 2 and 3 and says why ZeRO-1 is left
    out (GPT-2 on 8 H100s: ZeRO-1's 39.04 ms otherwise, ZeRO-2 the same step); --emit megatron weighs
    every stage, and --zero 1 is planned as asked."""
    base = ["plan", "gpt2", "-p", "8", "--machine", "dgx-h100", "--time-limit", "10", "--json"]
    free = json.loads(runner.invoke(app, base).stdout)
    titan = json.loads(runner.invoke(app, [*base, "--emit", "torchtitan"]).stdout)
    megatron = json.loads(runner.invoke(app, [*base, "--emit", "megatron"]).stdout)
    assert free["zero"] == 1 and megatron["zero"] == 1
    assert titan["zero"] in (0, 2, 3) and titan["step_s"] >= free["step_s"] * (1 - 1e-9)
    assert all(w["zero"] != 1 for w in titan["zero_choice"]["weighed"])
    assert "ZeRO-1 not weighed: torchtitan does not run it" in titan["zero_choice"]["why"]
    assert "not weighed" not in megatron["zero_choice"]["why"]
    asked = json.loads(runner.invoke(app, [*base, "--emit", "torchtitan", "--zero", "1"]).stdout)
    assert asked["zero"] == 1 and "refused" in asked["export"]


def test_the_deepspeed_launcher_runs_the_plans_devices_on_whole_nodes_alike():
    """--num_gpus is each node's devices: a count that is not a whole number of nodes runs fewer a
    node on more nodes (12 on nodes of 8: 6 on each of 2), never fewer devices than the plan."""
    for devices, per_node, gpus, nodes in ((16, 8, 8, 2), (12, 8, 6, 2), (20, 8, 5, 4), (6, 4, 3, 2), (4, 8, 4, 1),
                                           (7, 8, 7, 1), (11, 8, 1, 11)):
        line = deepspeed_launcher(devices, per_node, "ds.json", "train.py")
        assert line.startswith(f"deepspeed --num_gpus {gpus} --num_nodes {nodes} "), (devices, line)
        words = line.split()
        each, count = int(words[words.index("--num_gpus") + 1]), int(words[words.index("--num_nodes") + 1])
        assert each * count == devices and each <= per_node, (devices, line)


def test_an_edited_plans_header_gives_the_step_it_is_priced_now(plans, tmp_path):
    """The first line's step is the plan as `dnnplan predict PLAN.yaml` prices it now, not the figure
    a file edited by hand still carries."""
    text = open(plans["llama"]).read()
    assert "\nstep_s: " in text
    edited = tmp_path / "edited.yaml"
    edited.write_text("\n".join("step_s: 999.0" if line.startswith("step_s: ") else line
                                for line in text.splitlines()) + "\n")
    first = [runner.invoke(app, ["export", str(path), "--to", "megatron"]).output.splitlines()[0]
             for path in (plans["llama"], edited)]
    assert first[0] == first[1] and "999" not in first[1]


def test_a_deepspeed_file_of_a_cnn_is_predicted_as_data_parallelism(tmp_path):
    """DeepSpeed trains any model: its JSON of a network without transformer layers is predicted as
    data parallelism on every layer (planner.launch_import.to_plan); activation checkpointing, the
    script's of transformer layers, is refused for it in one line."""
    path = tmp_path / "ds_config.json"
    config = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2,
              "optimizer": {"type": "SGD", "params": {"momentum": 0.9}}, "zero_optimization": {"stage": 0}}
    path.write_text(json.dumps(config))
    got = runner.invoke(app, ["predict", "--from", str(path), "--network", "resnet50", "--machine", "dgx-a100"])
    assert got.exit_code == 0, got.output
    text = " ".join(got.output.split())
    assert "tensor 1; context 1; expert 1; data 8; 2 micro-batches of 16 a data-parallel rank, global batch 256" in text
    path.write_text(json.dumps(config | {"activation_checkpointing": {"partition_activations": False}}))
    line = one_error_line(runner.invoke(app, ["predict", "--from", str(path), "--network", "resnet50", "--machine",
                                              "dgx-a100"]))
    assert "ds_config.json" in line and "resnet50 has no transformer layers" in line


def test_a_sequence_the_framework_cannot_split_is_one_line(tmp_path, monkeypatch):
    """`dnnplan predict --context 3` on 16 positions (Megatron-Core and torchtitan split a sequence
    into 2 x 3 chunks), and tensor 2 with sequence parallelism on 15 (which predict refuses; a plan
    file edited by hand can hold it): each export is one line naming the attention layer, the
    sequence and the fix, --nearest too, nothing written; but Megatron-LM's nearest plan of the
    second is tensor 2 without sequence parallelism, which keeps the sequence whole."""
    from dnnplan.commands import predict as predict_command  # noqa: PLC0415 - this test's only use
    base = ["predict", "tiny-llama", "--machine", "dgx-h100", "--precision", "bf16", "--optimizer", "adam", "--zero",
            "3"]
    context = str(tmp_path / "cp3.yaml")
    made = runner.invoke(app, [*base, "-p", "6", "-b", "6", "--context", "3", "--out", context])
    assert made.exit_code == 0 and "need a multiple of 6" in " ".join(made.output.split())  # predict warns of it
    odd = str(tmp_path / "seq15.yaml")
    odd_args = [*base, "-p", "2", "-b", "4", "--tensor", "2", "--sequence-parallel", "--seq", "15", "--out", odd]
    assert "--sequence-parallel cuts the 15 positions" in one_error_line(runner.invoke(app, odd_args))
    monkeypatch.setattr(predict_command, "sequence_split", lambda net, splits: None)  # the file as edited by hand
    assert runner.invoke(app, odd_args).exit_code == 0
    monkeypatch.undo()
    for plan, to, says in ((context, "megatron", "2 x 3 chunks"), (context, "torchtitan", "2 x 3 chunks"),
                           (odd, "megatron", "over tensor 2"), (odd, "torchtitan", "over tensor 2")):
        for nearest in ([], ["--nearest"]):
            out = tmp_path / f"{to}.out"
            result = runner.invoke(app, ["export", plan, "--to", to, *nearest, "--out", str(out)])
            if plan == odd and to == "megatron" and nearest:
                assert result.exit_code == 0 and "--sequence-parallel" not in out.read_text(), result.output
                continue
            line = one_error_line(result)
            assert "layer 'h0.attn'" in line and says in line and "not a multiple of" in line, (to, nearest, line)
            assert not out.exists()


def test_an_empty_out_is_one_line(plans):
    """--out '' names no file: refused in one line (exit 2), nothing printed as if --out were left out."""
    for empty in ("", " "):
        result = runner.invoke(app, ["export", plans["llama"], "--to", "megatron", "--out", empty])
        assert f"--out '{empty}' names no file" in one_error_line(result) and "pretrain_gpt.py" not in result.stdout


@pytest.mark.parametrize("to, suffix, zero, framework", [("megatron", "sh", "1", "megatron"),
                                                         ("torchtitan", "toml", "3", "pytorch")])
def test_a_plan_priced_under_a_framework_reads_back_under_it(tmp_path, to, suffix, zero, framework):
    """The file's dnnplan line names the framework the plan was priced under, and `predict --from`
    prices under it: the same step and memory to the last digit."""
    plan = llama_plan(tmp_path, "--tensor", "2", "--sequence-parallel", "--zero", zero, "--framework", framework)
    path = tmp_path / f"{to}.{suffix}"
    assert runner.invoke(app, ["export", plan, "--to", to, "--out", str(path)]).exit_code == 0
    first = path.read_text().splitlines()[0]
    assert first.startswith("# dnnplan: predicted step ") and f" s under {framework} on 16 devices of dgx-h100" in first
    want = json.loads(runner.invoke(app, ["predict", plan, "--json"]).output)
    got = runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama", "--json"])
    assert got.exit_code == 0, got.output
    got = json.loads(got.output)
    assert (got["step_s"], got["memory_reserved_bytes"]) == (want["step_s"], want["memory_peak_bytes"])
    assert (got["priced_under"], got["written_step_s"]) == (framework, None)


def test_a_file_whose_line_states_another_step_says_so(plans, tmp_path):
    """A plan priced with what is not given again (its kernel profile) reads back at another step:
    the output says the line's step and this one, not silently one of them."""
    path = tmp_path / "megatron.sh"
    assert runner.invoke(app, ["export", plans["llama"], "--to", "megatron", "--out", str(path)]).exit_code == 0
    lines = path.read_text().splitlines()
    lines[0] = "# dnnplan: predicted step 99 s on 16 devices of dgx-h100"
    path.write_text("\n".join(lines) + "\n")
    got = runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama"])
    assert got.exit_code == 0, got.output
    assert "note: the file's dnnplan line states 99 s a step; as read here it predicts" in " ".join(got.output.split())
    got = json.loads(runner.invoke(app, ["predict", "--from", str(path), "--network", "tiny-llama", "--json"]).output)
    assert got["written_step_s"] == 99 and got["step_s"] < 99


def test_exporting_a_plan_over_its_devices_memory_warns(tmp_path):
    """A layout predicted as given (`predict --out`) may not fit: the export says the framework
    would run out of memory, and --json says memory_fits false."""
    plan = str(tmp_path / "big.yaml")
    made = runner.invoke(app, ["predict", "llama3-8b", "-p", "64", "-b", "256", "--machine", "dgx-h100", "--precision",
                               "bf16", "--tensor", "4", "--sequence-parallel", "--zero", "1", "--out", plan])
    assert made.exit_code == 0, made.output
    wrote = runner.invoke(app, ["export", plan, "--to", "megatron", "--out", str(tmp_path / "big.sh")])
    assert wrote.exit_code == 0 and "is over the 79.65 GiB of a dgx-h100 device: the framework would run out of " \
        "memory" in " ".join(wrote.output.split())
    data = json.loads(runner.invoke(app, ["export", plan, "--to", "megatron", "--json"]).stdout)
    assert data["memory_fits"] is False and data["memory_peak_bytes"] > 80 * 2 ** 30
    fits = json.loads(runner.invoke(app, ["export", llama_plan(tmp_path, "--zero", "1"), "--to", "megatron",
                                          "--json"]).stdout)
    assert fits["memory_fits"] is True


def test_plan_emit_without_out_says_to_keep_the_plan_before_exporting_its_nearest(monkeypatch):
    """A plan --emit refuses, which --nearest would make runnable: without --out there is no plan file
    to export, so the line says to keep it first (and names the fix once, not twice)."""
    from dnnplan.commands import plan as plan_command  # noqa: PLC0415 - this test's only use

    def refused(*args, **kwargs):
        raise DnnplanError("split N=4,F=2, where Megatron-LM's layout splits it N=8", layer="embed",
                           hint="re-plan with --tensor 2, or export with --nearest")

    monkeypatch.setattr(plan_command, "exported", refused)
    monkeypatch.setattr(plan_command, "nearest_runs", lambda *args: True)
    got = runner.invoke(app, ["plan", "tiny-llama", "-p", "2", "--time-limit", "5", "--emit", "megatron"])
    line = " ".join(got.stderr.split())
    assert got.exit_code == 2 and "--emit megatron: layer 'embed': split N=4,F=2" in line, line
    assert "(keep the plan with --out PLAN.yaml, then `dnnplan export PLAN.yaml --to megatron --nearest` writes " \
           "the closest plan it runs, as `--emit megatron --nearest` prints it after the plan)" in line
    assert line.count("--nearest") == 2  # the refusal's own hint (export with --nearest) is not said again


def test_a_spec_that_states_no_rotary_base_is_warned_of_and_a_zoo_network_is_not(tmp_path):
    """A spec of one's own (or imported before the importer read rope_theta) whose attention rotates
    without a rotary_base is trained at the framework's default base: said on stderr, the file still
    written; a zoo network's spec states what its model uses (tiny-llama, Llama 2: the default)."""
    spec = tmp_path / "mine.yaml"
    spec.write_text((ZOO / "tiny-llama.yaml").read_text().replace("name: tiny-llama", "name: mine"))
    for network, warned in ((str(spec), True), ("tiny-llama", False)):
        plan = tmp_path / f"{warned}.yaml"
        made = runner.invoke(app, ["predict", network, "-p", "16", "-b", "32", "--machine", "dgx-h100", "--precision",
                                   "bf16", "--optimizer", "adam", "--zero", "3", "--out", str(plan)])
        assert made.exit_code == 0, made.output
        for to in ("megatron", "torchtitan"):
            got = runner.invoke(app, ["export", str(plan), "--to", to, "--out", str(tmp_path / f"{warned}.{to}")])
            assert got.exit_code == 0, got.output
            said = "states no rotary_base: the launch trains at " in " ".join(got.output.split())
            assert said == warned, got.output


def test_a_torchtitan_file_read_on_a_network_with_biases_is_refused(plans, tmp_path):
    """torchtitan's llama-style models have no biases (the export refuses such a plan): a torchtitan
    file read on a network with them (--network, or a file an earlier dnnplan wrote) is one line."""
    spec = tmp_path / "biased.yaml"
    spec.write_text((ZOO / "tiny-llama.yaml").read_text().replace("name: tiny-llama", "name: biased")
                    .replace("causal: true, bias: false", "causal: true, bias: true"))
    toml = tmp_path / "job.toml"
    made = runner.invoke(app, ["export", plans["llama"], "--to", "torchtitan", "--out", str(toml)])
    assert made.exit_code == 0, made.output
    toml.write_text(toml.read_text().replace('flavor = "tiny-llama"', 'flavor = "biased"'))
    line = one_error_line(runner.invoke(app, ["predict", "--from", str(toml), "--network", str(spec)]))
    assert "biased's h0.attn has biases, and torchtitan's llama-style models have none" in line
