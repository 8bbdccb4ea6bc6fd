"""The command line's edges: a reader that leaves, numbers no value can be, flags that change nothing."""

import io
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dnnplan.cli import EXIT_PIPE, app
from dnnplan.render.terminal.console import Console

runner = CliRunner()


def test_a_reader_that_leaves_ends_the_command_quietly_as_a_shell_expects():
    """`dnnplan info resnet152 | head -1`: the writes after the reader left end the command with
    128 + SIGPIPE and nothing on stderr (rich's own console would exit 1)."""
    for args in (["info", "resnet152"], ["info", "resnet152", "--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "dnnplan", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0)
        assert proc.stdout.read(1)  # the first byte (its output, 75 and 100 kB, is more than a pipe holds)
        proc.stdout.close()  # the reader leaves
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == EXIT_PIPE == 141, err
        assert err == ""


def test_help_to_a_reader_that_left_ends_quietly_as_a_shell_expects():
    """`dnnplan --help | head -3`: help is smaller than a pipe holds, so the reader leaves first
    here (before the command writes), and the write fails; 128 + SIGPIPE, nothing on stderr."""
    for args in (["--help"], ["plan", "--help"], []):
        proc = subprocess.Popen([sys.executable, "-m", "dnnplan", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0)
        proc.stdout.close()  # the reader leaves before the interpreter has started
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == EXIT_PIPE, (args, err)
        assert err == "", args


def test_a_number_no_value_can_be_is_one_line_naming_the_file(tmp_path):
    huge = "9" * 5000  # past the 4,300 digits Python reads into an integer
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "vocab_size": %s, "hidden_size": 64, "intermediate_size": 128, '
                      '"num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128}' % huge)
    spec = tmp_path / "big.yaml"
    spec.write_text("name: big\ninput: [3, 32, 32]\nlayers:\n  - {name: fc, op: linear, features: %s}\n" % huge)
    for path, where in ((config, str(config)), (spec, f"{spec}:4")):
        got = runner.invoke(app, ["plan", str(path), "-p", "2"])
        assert got.exit_code == 2, got.output
        assert got.output.startswith(f"error: {where}") and "more than 4,300 digits" in got.output
        assert "internal error" not in got.output and "set_int_max_str_digits" not in got.output


def test_a_flag_that_changes_nothing_for_the_network_says_so():
    cases = ((["plan", "resnet18", "-p", "2", "--moe-dispatch", "flex", "--machine", "dgx-h100"],
              "--moe-dispatch flex changes nothing: resnet18 has no mixture-of-experts layer"),
             (["plan", "gpt-tiny", "-p", "2", "--batch-norm", "local"],
              "--batch-norm local changes nothing: gpt-tiny has no batch normalisation"),
             (["predict", "resnet18", "--attention", "flash"],
              "--attention flash changes nothing: resnet18 has no attention layer"),
             (["predict", "resnet18", "-p", "2", "--overlap", "none", "--bucket-mb", "50"],
              "--bucket-mb 50 changes nothing: --overlap none overlaps no gradient bucket"),
             (["predict", "gpt-tiny", "-p", "2", "--expert", "2"],
              "--expert 2 changes nothing: gpt-tiny has no mixture-of-experts layer"),
             (["predict", "gpt-tiny", "-p", "2", "--overlap", "data+experts"],
              "--overlap data+experts: its +experts changes nothing: gpt-tiny has no mixture-of-experts layer"),
             (["predict", "gpt-tiny", "-p", "2", "--sequence-parallel"],
              "--sequence-parallel changes nothing without --tensor above 1"),
             (["predict", "gpt-tiny", "-p", "2", "--chunks", "2"],
              "--chunks 2 changes nothing without --pipeline and --schedule interleaved"),
             (["predict", "gpt-tiny", "-p", "2", "--schedule", "gpipe"],
              "--schedule gpipe changes nothing without --pipeline or --micro-batches"),
             (["plan", "gpt-tiny", "-p", "2", "--foreign-profile"],
              "--foreign-profile changes nothing without --profile"),
             (["plan", "gpt-tiny", "-p", "2", "--no-step-context"],
              "--step-context applies to machine `local` without --profile (kernels timed on this computer); ignored"),
             (["predict", "gpt-tiny", "-p", "2", "--step-context"],
              "--step-context applies to a plan file for machine `local`"),
             (["plan", "resnet18", "-p", "2", "--schedule", "interleaved"],
              "--schedule interleaved changes nothing: resnet18 is not a stack of identical blocks, so it is never "
              "pipelined"),
             (["plan", "resnet18", "-p", "2", "--prove", "1"],
              "--prove 1 changes nothing: resnet18 is not a stack of identical blocks, so it is never pipelined"))
    for args, line in cases:
        got = runner.invoke(app, args)
        assert got.exit_code == 0 and f"warning: {line}" in got.output, got.output
    used = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--schedule", "gpipe"])  # a stack: weighed
    assert used.exit_code == 0 and "changes nothing" not in used.output
    used = runner.invoke(app, ["plan", "tiny-moe", "-p", "2", "--moe-dispatch", "flex", "--machine", "dgx-h100"])
    assert used.exit_code == 0 and "changes nothing" not in used.output
    used = runner.invoke(app, ["predict", "tiny-moe", "-p", "4", "--expert", "2", "--tensor", "2", "--sequence-parallel"])
    assert used.exit_code == 0 and "changes nothing" not in used.output


def test_context_on_a_cnn_says_it_splits_the_image_height():
    got = runner.invoke(app, ["predict", "resnet18", "-p", "8", "--context", "2"])
    assert got.exit_code == 0 and ("warning: --context 2 splits resnet18's image height over 2 devices (a spatial "
                                   "split, the rows at each cut exchanged): it has no sequence") in got.output
    sequence = runner.invoke(app, ["predict", "gpt-tiny", "-p", "4", "--context", "2"])
    assert sequence.exit_code == 0 and "image height" not in sequence.output


def test_a_token_budget_and_a_price_add_time_and_cost_to_train():
    """--tokens and --gpu-hour-price: the summary's line and the JSON's ``train``, at the step the
    command predicts (plan and predict alike)."""
    args = ["gpt2", "-p", "8", "--tokens", "1B", "--gpu-hour-price", "2"]
    for command in ("plan", "predict"):
        data = json.loads(runner.invoke(app, [command, *args, "--json"]).stdout)
        train = data["train"]
        per_step = data["batch"] * 1024  # gpt2's sequence
        assert train["tokens_per_step"] == per_step and train["steps"] == -(-10 ** 9 // per_step)
        assert train["seconds"] == pytest.approx(train["steps"] * data["step_s"], rel=1e-12)
        assert train["cost"] == pytest.approx(train["device_hours"] * 2, rel=1e-12)
        text = runner.invoke(app, [command, *args]).output
        assert "to train 1B tokens:" in text and "device-hours" in text
        assert " hours on 8 devices" in text and "0.0 days" not in text  # under a day: said in hours
    for args, line in ((["predict", "resnet50", "--tokens", "1T"], "reads no token ids"),
                       (["plan", "gpt2", "--gpu-hour-price", "2"], "--gpu-hour-price prices a token budget")):
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2 and line in bad.output, bad.output


def test_time_to_train_a_layout_that_does_not_fit_says_so_and_the_json_carries_the_limit():
    """gpt2 at batch 512 on one A100 holds more than 80 GiB: its time to train is said to be for a
    layout that cannot run, and every predict JSON (one stage or a pipeline) says whether it fits
    its machine's memory, with the machine and the ZeRO stage, as plan's does."""
    over = ["predict", "gpt2", "-p", "1", "-b", "512", "--tokens", "1B"]
    assert "were it to fit in memory (it does not): to train 1B tokens" in " ".join(
        runner.invoke(app, over).output.split())
    data = json.loads(runner.invoke(app, [*over, "--json"]).stdout)
    assert data["memory_fits"] is False and data["memory_limit_bytes"] == 80 * 2 ** 30 < data["memory_peak_bytes"]
    piped = json.loads(runner.invoke(app, ["predict", "gpt-tiny", "-p", "4", "--pipeline", "2", "--micro-batches", "4",
                                           "--json"]).stdout)
    assert piped["machine"] == "dgx-a100" and piped["zero"] == 0 and piped["memory_fits"] is True
    fits = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--tokens", "1B"]).output
    assert "to train 1B tokens" in fits and "were it to fit" not in fits
    planned = json.loads(runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--json"]).stdout)
    assert planned["memory_fits"] is True and planned["memory_limit_bytes"] == 80 * 2 ** 30
    assert planned["framework"] == "ideal" and planned["machine"] == "dgx-a100"


def test_a_huge_token_budget_reads_in_whole_t_and_one_device_is_singular():
    text = " ".join(runner.invoke(app, ["predict", "gpt-tiny", "-p", "1", "--tokens", "1e18"]).output.split())
    assert "to train 1,000,000T tokens:" in text and " on 1 device (" in text


def test_a_plot_named_empty_or_dash_is_one_line():
    for name in ("", "-"):
        got = runner.invoke(app, ["plan", "gpt-tiny", "--sweep", "1,2", "--plot", name])
        assert got.exit_code == 2 and "names no file" in got.output, got.output


def test_a_blank_machine_or_sweep_is_one_line_not_the_default():
    for args, words in ((["predict", "gpt-tiny", "-m", ""], "--machine '' names no machine"),
                        (["plan", "gpt-tiny", "--sweep", ""], "--sweep '' names no device count")):
        got = runner.invoke(app, args)
        assert got.exit_code == 2 and words in got.output, got.output


def test_a_bad_machine_or_device_count_on_the_command_line_names_no_file_field():
    for args, words in ((["predict", "gpt-tiny", "-m", "no-such"], "error: unknown machine 'no-such'"),
                        (["predict", "lenet5", "-m", "local", "-p", "100000"], "error: 100000 devices do not fit")):
        got = runner.invoke(app, args)
        assert got.exit_code == 2 and words in got.output and "field '" not in got.output, got.output


def test_text_holding_an_emoji_code_is_printed_as_written():
    """A layer or file name such as ``:fire:`` is printed as it is, not as rich's emoji."""
    out = io.StringIO()
    console = Console(file=out, width=80)
    console.print("layer :fire: of conv:1:")
    assert out.getvalue() == "layer :fire: of conv:1:\n"


def test_a_mistake_on_the_command_line_itself_is_one_line_with_the_fix():
    """An unknown option, a value of the wrong type, a missing network, an unknown command: one
    line (not click's box) naming the command, the fix where known and its `-h`; exit 2. Another
    tool's name for an option is answered with dnnplan's (Megatron-LM's `--tp` is `--tensor`)."""
    for args, words in ((["predict", "gpt-tiny", "-p", "4", "--tp", "2"],
                         "dnnplan predict: no such option --tp: use --tensor (the tensor-parallel group's size)"),
                        (["plan", "gpt-tiny", "--pp", "2"], "no such option --pp: use --pipeline"),
                        (["plan", "gpt-tiny", "--devise", "8"], "no such option --devise: did you mean --devices"),
                        (["plan", "gpt-tiny", "--devices", "eight"], "dnnplan plan: Invalid value for '--devices'"),
                        (["plan"], "dnnplan plan: Missing argument 'network'; `dnnplan plan -h` lists its usage"),
                        (["plna", "gpt-tiny"], "Did you mean 'plan'? `dnnplan -h` lists the commands"),
                        (["export", "gpt-tiny", "--tp", "2"], "dnnplan export: no such option --tp: did you mean --to"),
                        # a launcher's device count is --ranks where a command runs MPI ranks
                        (["execute", "p.yaml", "--devices", "2"], "dnnplan execute: no such option --devices: use "
                                                                  "--ranks (the MPI ranks it runs on)"),
                        (["validate", "lenet5", "--np", "2"], "no such option --np: use --ranks"),
                        (["execute", "p.yaml", "-np", "2"], "dnnplan execute: -np is read as -n p: mpiexec's -np is "
                                                            "--ranks (-n) here"),
                        # plan's and predict's own ways: plan chooses the splits; recomputation's flags differ
                        (["plan", "gpt-tiny", "--tensor", "2"], "dnnplan plan: no such option --tensor: plan chooses "
                                                                "each layer's split itself; `dnnplan predict NETWORK "
                                                                "--tensor ...` prices a layout you give"),
                        (["plan", "gpt-tiny", "--recompute", "full"], "dnnplan plan: --recompute is a switch here "
                                                                      "(--recompute, --no-recompute"),
                        (["predict", "gpt-tiny", "--no-recompute"], "no such option --no-recompute: use --recompute "
                                                                    "none"),
                        # an option's missing value: the command's own help, not the group's
                        (["execute", "p.yaml", "--ranks", "2", "--json"], "dnnplan execute: Option '--json' requires "
                                                                          "an argument; `dnnplan execute -h`")):
        got = runner.invoke(app, args)
        lines = got.output.strip().splitlines()
        assert got.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), got.output
        assert words in " ".join(lines[0].split()), got.output
    shown = runner.invoke(app, [])  # no arguments at all: the help, as before
    assert "Usage: dnnplan" in shown.output and "error:" not in shown.output


def test_every_other_tools_option_name_maps_to_an_option_of_plan_or_predict():
    """dnnplan.usage_errors.OTHER_NAMES answers with options that exist (a renamed option would
    leave the answer pointing nowhere)."""
    import typer.main  # noqa: PLC0415 - this test's only use
    from dnnplan.usage_errors import OTHER_NAMES  # noqa: PLC0415 - this test's only use
    group = typer.main.get_command(app)
    options = {o for name in ("plan", "predict") for p in group.get_command(None, name).params for o in p.opts}
    assert {target for target, _ in OTHER_NAMES.values()} <= options
    assert not set(OTHER_NAMES) & options  # none of them is already one of dnnplan's


def test_a_pipelined_prediction_names_its_machine_as_every_step_does():
    got = runner.invoke(app, ["predict", "gpt-tiny", "-p", "4", "--pipeline", "2", "--micro-batches", "4",
                              "-m", "dgx-h100"])
    assert got.exit_code == 0 and "gpt-tiny: batch 64 on 4 x dgx-h100, 2 stages" in got.output, got.output


def test_predict_takes_one_price_or_the_pair_of_the_machine_it_predicts():
    """A MACHINE=PRICE pair, as `plan -m A,B` takes them, is the price where it names the machine
    predicted (the same flag serves both commands); another machine's, or several, are one line."""
    args = ["predict", "gpt2", "-p", "8", "--machine", "dgx-h100", "--tokens", "15T", "--json", "--gpu-hour-price"]
    alone, paired = (json.loads(runner.invoke(app, [*args, price]).stdout)["train"]
                     for price in ("2.5", "dgx-h100=2.5"))
    assert paired == alone and paired["price_per_device_hour"] == 2.5
    other = runner.invoke(app, [*args, "dgx-a100=2.5"])
    assert other.exit_code == 2 and "--gpu-hour-price prices 'dgx-a100', and this prices dgx-h100" in other.output
    pair = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--tokens", "15T", "--gpu-hour-price",
                               "dgx-a100=2.5,dgx-h100=3"])
    assert pair.exit_code == 2 and "is not a price (this command prices one " \
        "machine: give its price alone, e.g. 2.5;" in " ".join(pair.output.split()), pair.output
    for bad in ("-1", "nan", "cheap"):
        got = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--tokens", "15T", "--gpu-hour-price", bad])
        assert got.exit_code == 2 and got.output.startswith("error: --gpu-hour-price"), got.output
    one = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--tokens", "15T", "--gpu-hour-price", "2.5", "--json"])
    assert one.exit_code == 0 and json.loads(one.stdout)["train"]["cost"] > 0, one.output


def test_plan_names_a_pipeline_or_micro_batch_count_that_cannot_be():
    """plan --micro-batches 3 or --pipeline 3 said only "no pipeline degree and micro-batch count to
    try"; predict named the count. Now both name it."""
    cases = ((["--micro-batches", "3"], "--micro-batches 3 does not divide the batch 64"),
             (["--pipeline", "3"], "--pipeline 3 does not divide the 8 devices"),
             (["--pipeline", "8"], "--pipeline 8 is more stages than gpt-tiny's"))
    for args, words in cases:
        got = runner.invoke(app, ["plan", "gpt-tiny", "-p", "8", "-b", "64", *args])
        assert got.exit_code == 2 and words in got.output, got.output


def test_under_mpiexec_a_mistake_is_said_once_by_rank_0(monkeypatch):
    """`mpiexec -n 2 dnnplan execute bad.yaml`: every rank finds the same mistake; rank 0 says it,
    the others exit 2 silently (the launcher's environment numbers them)."""
    args = ["execute", "no-such-plan.yaml", "--ranks", "2"]
    for env, said in (({"PMI_RANK": "0"}, True), ({"PMI_RANK": "1"}, False), ({"OMPI_COMM_WORLD_RANK": "3"}, False),
                      ({"PMIX_RANK": "0"}, True), ({}, True)):
        for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_STEP_ID"):
            monkeypatch.delenv(var, raising=False)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        got = runner.invoke(app, args)
        assert got.exit_code == 2 and ("no such plan file" in got.output) == said, (env, got.output)


@pytest.mark.parametrize("args", [["predict", "gpt-tiny", "-p", "2", "--out", ""],
                                  ["plan", "gpt-tiny", "-p", "2", "--out", ""],
                                  ["profile", "lenet5", "--quick", "--out", ""],
                                  ["execute", "x.yaml", "--ranks", "2", "--json", ""],
                                  ["validate", "lenet5", "--ranks", "2", "--json", ""]])
def test_an_empty_file_name_is_refused_not_taken_for_the_option_left_out(args):
    """`--out ''` wrote nothing and said nothing; profile's went to the per-user cache; execute's
    ran its whole job: each is one line, before any work."""
    got = runner.invoke(app, args)
    flag = args[-2]
    assert got.exit_code == 2 and f"{flag} '' names no file" in got.output, got.output


def test_a_predict_json_kept_in_a_file_is_said_not_to_be_a_plan_and_a_machine_name_no_field(tmp_path):
    saved = tmp_path / "base.json"
    saved.write_text(runner.invoke(app, ["predict", "gpt-tiny", "-p", "2", "--json"]).stdout)
    for command in (["export", str(saved), "--to", "megatron"], ["predict", str(saved)]):
        got = runner.invoke(app, command)
        assert got.exit_code == 2 and "is the JSON `dnnplan predict --json` prints, not a plan file" in got.output
    unknown = runner.invoke(app, ["machines", "dgx-h10"])
    assert unknown.exit_code == 2 and unknown.output.startswith("error: unknown machine 'dgx-h10' (did you mean")


def test_an_ascii_only_terminal_gets_the_answer_in_ascii():
    """A locale that writes ASCII alone (PYTHONIOENCODING=ascii, LC_ALL=en_US.ASCII): the tables in
    ASCII boxes and µs as us, not an encoding error after the work ("internal error", exit 1)."""
    import os
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for args, said in ((["predict", "gpt2", "-p", "8", "--layers"], "| embed "), (["machines", "dgx-h100"], "2 us latency"),
                       (["info", "resnet18"], "1x64x112x112")):
        got = subprocess.run([sys.executable, "-m", "dnnplan", *args], capture_output=True, env=env, timeout=120)
        assert got.returncode == 0, got.stderr.decode(errors="replace")
        text = got.stdout.decode("ascii")  # every byte ASCII
        assert said in text, text[:2000]
    from dnnplan.entry import _nearest_ascii
    assert _nearest_ascii(UnicodeEncodeError("ascii", "5 µs × 2 — é ☃", 2, 14, "")) == ("us x 2 -- e ?", 14)


def test_out_to_standard_output_redirected_to_a_file_keeps_the_tables_and_adds_the_plan(tmp_path):
    """`dnnplan predict gpt2 -p 8 --out /dev/stdout > so.txt`: the plan is written into the stream
    after the tables, as through a pipe; no --force is asked (it said "/dev/stdout already exists"),
    and the redirection's file is not replaced by the plan alone (the tables were lost)."""
    import yaml
    kept = tmp_path / "so.txt"
    with open(kept, "w") as fh:
        got = subprocess.run([sys.executable, "-m", "dnnplan", "predict", "gpt2", "-p", "8", "--out", "/dev/stdout"],
                             stdout=fh, stderr=subprocess.PIPE, timeout=120)
    assert got.returncode == 0, got.stderr.decode()
    text = kept.read_text()
    tables, _, plan = text.partition("\nversion:")
    assert "step " in tables and "model FLOP utilisation" in tables
    assert yaml.safe_load("version:" + plan)["network_name"] == "gpt2"


def test_a_suggested_command_quotes_a_path_a_shell_would_split(tmp_path):
    """The command said after a plan is written pastes into a shell as it is: a folder with a space
    is quoted (it read `dnnplan predict dir with space/x.yaml`, three arguments)."""
    import shlex
    folder = tmp_path / "dir with space"
    folder.mkdir()
    out = str(folder / "x.yaml")
    got = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--out", out], env={"COLUMNS": "400"})
    assert got.exit_code == 0, got.output
    said = got.output.split("`")[-2]  # the command between the backquotes of the last line
    assert shlex.split(said) == ["dnnplan", "predict", out]


def test_an_output_naming_the_input_is_refused_even_with_force(tmp_path):
    """`dnnplan export plan.yaml --out plan.yaml --force` replaced the plan by its export, and
    `predict spec.yaml --out spec.yaml --force` a spec by a plan: one line, exit 2, the input kept."""
    plan = tmp_path / "p.yaml"
    made = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--machine", "dgx-h100", "--out", str(plan)])
    assert made.exit_code == 0, made.output
    before = plan.read_bytes()
    for args in (["export", str(plan), "--to", "megatron", "--out", str(plan), "--force"],
                 ["plan", str(plan), "-p", "8", "--out", str(tmp_path / "." / "p.yaml"), "--force"]):
        got = runner.invoke(app, args)
        assert got.exit_code == 2 and "names the file this command reads, which it would replace" in got.output, \
            got.output
        assert plan.read_bytes() == before


@pytest.mark.parametrize("args, said", [
    (["predict", "-"], "'-' names standard input, and a network spec is read from a file"),
    (["export", "-", "--to", "megatron"], "'-' names standard input, and a plan is read from a file"),
    (["predict", "--from", "-", "--network", "llama3-8b", "-p", "8"], "'-' names standard input"),
    (["import", "-"], "'-' names standard input, and a model is read from a file"),
    (["predict", "gpt2", "-p", "8", "--machine", "-"], "'-' names standard input, and a machine is read from a file"),
])
def test_a_dash_for_standard_input_is_one_line(args, said, tmp_path, monkeypatch):
    """`-`, standard input by the shell tools' convention, is refused in one line: `cat p.yaml |
    dnnplan predict -` predicted a stale file of that name, another network, exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("stale")
    got = runner.invoke(app, args)
    assert got.exit_code == 2 and said in " ".join(got.output.split()), got.output
    assert (tmp_path / "-").read_text() == "stale"


def test_out_dash_is_standard_output_as_import_takes_it(tmp_path):
    """`--out -` writes to standard output, after what the command prints (it wrote a file called '-')."""
    got = subprocess.run([sys.executable, "-m", "dnnplan", "predict", "gpt2", "-p", "8", "--out", "-"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and "\nversion: 1\nnetwork: gpt2\n" in got.stdout, got.stderr
    assert not (tmp_path / "-").exists() and "wrote" not in got.stdout


def test_json_beside_an_output_on_standard_output_is_one_line():
    """--json keeps standard output for its one object: --out - (or /dev/stdout) beside it made it
    no longer JSON (the plan's YAML before or after it)."""
    for args in (["predict", "gpt2", "-p", "8", "--json", "--out", "-"],
                 ["plan", "gpt-tiny", "-p", "4", "--json", "--out", "/dev/stdout"]):
        got = runner.invoke(app, args)
        assert got.exit_code == 2 and "both write standard output, which --json keeps for its object" in \
            " ".join(got.output.split()), got.output


def test_an_output_naming_the_machine_file_read_is_refused(tmp_path):
    """The machine YAML the command reads is an input too: --out over it replaced the machine."""
    import shutil
    from tests.support.paths import ROOT
    machine = tmp_path / "m.yaml"
    shutil.copy(ROOT / "costmodel" / "machine" / "dgx-h100.yaml", machine)
    before = machine.read_bytes()
    got = runner.invoke(app, ["predict", "gpt-tiny", "-p", "2", "--machine", str(machine), "--out", str(machine),
                              "--force"])
    assert got.exit_code == 2 and "names the file this command reads" in got.output and machine.read_bytes() == before


def test_a_path_a_shell_reads_as_an_option_is_suggested_as_a_path():
    from networks.writing import shell_word
    assert shell_word("-y.yaml") == "./-y.yaml" and shell_word("a b/x.yaml") == "'a b/x.yaml'"
    assert shell_word("plan.yaml") == "plan.yaml"


def test_a_width_of_zero_columns_is_no_width_and_cells_are_never_cut():
    """COLUMNS=0: rich drew in no columns, so an error line and the help vanished (exit 2 without a
    word); now the terminal's width is used. Tables wrap a cell onto more lines rather than cutting
    it: `dnnplan machines` piped showed 'dgx-a100-40…', `info googlenet` 'inception3a.bran…'."""
    import os
    for width in ("0", "²"):  # '²' passes str.isdigit, and rich's int() of it ended its start in a traceback
        got = subprocess.run([sys.executable, "-m", "dnnplan", "plan", "resnet50", "-p", "8", "--zero", "9"],
                             capture_output=True, text=True, env={**os.environ, "COLUMNS": width}, timeout=120)
        assert got.returncode == 2 and "error: --zero must be from 0 to 3, got 9" in got.stderr, got.stderr
    for args, name in ((["machines"], "dgx-a100-40gb"), (["info", "googlenet"], "inception3a.branch2a")):
        got = subprocess.run([sys.executable, "-m", "dnnplan", *args], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": "80"}, timeout=120)
        assert got.returncode == 0 and "…" not in got.stdout, got.stdout[:2000]
        assert name in got.stdout.replace("\n", "") or name[:8] in got.stdout


@pytest.mark.parametrize("width", ["50", "80"])
def test_the_help_of_every_command_is_whole_however_narrow_the_terminal(width):
    """`--help` draws its options in a panel of tables whose description cells hold long words (flag
    names, file paths): at 80 columns `plan --help` cut '--overlap-param-gather…' and
    '(costmodel/frameworks/…', at 50 the option names themselves ('--strate…'). Folded onto more
    lines instead, every word is there whole."""
    import os
    for command in ("plan", "predict", "execute", "validate"):
        got = subprocess.run([sys.executable, "-m", "dnnplan", command, "--help"], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": width}, timeout=120)
        assert got.returncode == 0 and "…" not in got.stdout, got.stdout[:3000]
        assert f"Usage: dnnplan {command} [OPTIONS]" in got.stdout


def test_a_plan_out_refusal_names_the_flags_given_and_a_command_that_writes_such_a_plan():
    """`predict --out` with micro-batches alone named 'a ZeRO-3 --framework' no one gave; the command it
    points at writes the plan (`plan --pipeline 1 --micro-batches M`: gradient accumulation)."""
    from typer.testing import CliRunner
    from dnnplan.cli import app
    got = CliRunner().invoke(app, ["predict", "tiny-llama", "-p", "4", "-b", "16", "--micro-batches", "4", "--out",
                                   "x.yaml"])
    line = " ".join(got.output.split())
    assert got.exit_code == 2 and "(drop --micro-batches, or plan it with `dnnplan plan --pipeline S " \
        "--micro-batches M --out FILE`)" in line, line
    assert "--framework" not in line
