"""`dnnplan import` and the other commands given a config.json, a folder holding one, or an ONNX file:
the written spec loads, plans and executes; mistakes are one line and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

from dnnplan.cli import app
from networks.loader import load_network
from networks.ops.catalogue import OPS

from tests.support.cli_errors import one_error_line
from tests.support.onnx_builders import Builder
from tests.support.paths import ASSETS

runner = CliRunner()
HF = ASSETS / "hf"
ONNX = ASSETS / "onnx"


def test_import_prints_the_spec_and_writes_it_with_out(tmp_path):
    printed = runner.invoke(app, ["import", str(HF / "gpt2"), "--seq", "512"])
    assert printed.exit_code == 0, printed.output
    assert "name: gpt2" in printed.output and "tokens: {shape: [512]" in printed.output
    out = tmp_path / "gpt2.yaml"
    written = runner.invoke(app, ["import", str(HF / "gpt2" / "config.json"), "--seq", "512", "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text() == printed.output
    assert f"wrote {out}: gpt2, 125 layers, 124,439,808 parameters" in " ".join(written.output.split())
    again = runner.invoke(app, ["import", str(HF / "gpt2"), "--out", str(out)])
    assert "already exists" in one_error_line(again)


def test_out_names_a_file_the_spec_reads_back_from_and_never_the_model(tmp_path):
    """A .json name would be read back as JSON (the spec is YAML with comments); the model's own
    file would be replaced by its spec, even with --force; ``-`` prints; an empty name is refused."""
    to_json = runner.invoke(app, ["import", str(HF / "gpt2"), "--out", str(tmp_path / "gpt2.json")])
    assert "the spec is YAML" in one_error_line(to_json) and "gpt2.yaml" in to_json.output
    model = tmp_path / "m.onnx"
    model.write_bytes((ONNX / "resnet50.onnx").read_bytes())
    onto = runner.invoke(app, ["import", str(model), "--out", str(model), "--force"])
    assert "is the model being imported" in one_error_line(onto)
    assert model.read_bytes() == (ONNX / "resnet50.onnx").read_bytes()
    dashed = runner.invoke(app, ["import", str(HF / "gpt2"), "--out", "-"])
    assert dashed.exit_code == 0 and dashed.output.startswith("# Imported") and not Path("-").exists()
    assert "--out '' names no file" in one_error_line(runner.invoke(app, ["import", str(HF / "gpt2"), "--out", ""]))


def test_a_layer_the_config_makes_too_large_names_the_config_not_a_line_of_the_spec(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 2 ** 31, "num_attention_heads": 2 ** 31,
                                  "num_key_value_heads": 1, "num_hidden_layers": 2, "intermediate_size": 64,
                                  "vocab_size": 100}))
    line = one_error_line(runner.invoke(app, ["import", str(config)]))
    assert f"{config}, layer 'layers0.attn': its weights have more than 2^48 elements" in line
    assert f"{config}:" not in line and "check them" in line


def test_a_path_that_is_not_there_or_a_misspelt_family_is_said_so(tmp_path):
    missing = one_error_line(runner.invoke(app, ["import", str(tmp_path / "nope")]))
    assert "nope: no such file or folder" in missing
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "Llama", "hidden_size": 64}))
    assert "model_type 'Llama' is not a family dnnplan imports (did you mean llama?" in \
        one_error_line(runner.invoke(app, ["import", str(config)]))


def test_import_json_gives_the_count_and_the_spec():
    result = runner.invoke(app, ["import", str(ONNX / "resnet50.onnx"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["params"] == 25_557_032 and data["layers"] == 176 and data["spec"].startswith("# Imported")


def test_info_shows_the_sources_parameter_count_on_the_written_spec(tmp_path):
    out = tmp_path / "r50.yaml"
    assert runner.invoke(app, ["import", str(ONNX / "resnet50.onnx"), "-o", str(out)]).exit_code == 0
    for network in (str(out), str(ONNX / "resnet50.onnx")):
        result = runner.invoke(app, ["info", network, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["totals"]["params"] == 25_557_032


def test_plan_takes_a_config_in_one_command_and_the_plan_fits():
    """Issue 53's command: `dnnplan plan Meta-Llama-3-8B/config.json --devices 64 --precision bf16`."""
    config = str(HF / "Meta-Llama-3-8B" / "config.json")
    result = runner.invoke(app, ["plan", config, "--devices", "64", "--precision", "bf16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the search's progress line goes to stderr
    assert data["network_name"] == "Meta-Llama-3-8B" and data["devices"] == 64
    assert data["step_s"] > 0 and 0 < data["memory_peak_bytes"] <= data["solver"]["memory_limit_bytes"]


def _tiny_cnn(path: Path) -> None:
    b = Builder()
    x = helper.make_tensor_value_info("image", onnx.TensorProto.FLOAT, ["N", 1, 8, 8])
    c = b.node("Conv", ["image", b.weight("conv.weight", 4, 1, 3, 3), b.weight("conv.bias", 4)], "conv",
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    bn = b.node("BatchNormalization", [c, *(b.weight(f"bn.{n}", 4) for n in ("g", "b", "m", "v"))], "bn")
    pool = b.node("MaxPool", [b.node("Relu", [bn], "relu")], "pool", kernel_shape=[2, 2], strides=[2, 2])
    fc = b.node("Gemm", [b.node("Flatten", [pool], "flat"), b.weight("fc.weight", 5, 64), b.weight("fc.bias", 5)],
                "fc", transB=1)
    b.node("Softmax", [fc], "probs", axis=-1)
    onnx.save(b.model([x], "probs", ["N", 5]), str(path))


@pytest.mark.mpi
def test_an_imported_model_plans_and_executes_with_check(tmp_path):
    model = tmp_path / "tiny.onnx"
    _tiny_cnn(model)
    assert load_network(str(model)).num_params == 36 + 4 + 8 + 64 * 5 + 5
    plan = tmp_path / "plan.yaml"
    planned = runner.invoke(app, ["plan", str(model), "--devices", "2", "--batch", "8", "--machine", "dgx-a100",
                                  "--out", str(plan)])
    assert planned.exit_code == 0, planned.output
    out = tmp_path / "run.json"
    result = runner.invoke(app, ["execute", str(plan), "--ranks", "2", "--steps", "2", "--warmup", "1", "--check",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["check"]["passed"]


@pytest.mark.parametrize("command", ["import", "info", "plan"])
def test_mistakes_are_one_line_and_exit_2(tmp_path, command):
    bad_json = tmp_path / "config.json"
    bad_json.write_text('{"model_type": "llama",')
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07not a model\xff")
    empty = tmp_path / "empty"
    empty.mkdir()
    odd = tmp_path / "odd.onnx"
    b = Builder()
    b.node("Gemm", [b.node("Sin", ["x"], "odd"), b.weight("w", 4, 8)], "fc", transB=1)
    onnx.save(b.model([helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8])], "fc", ["N", 4]), str(odd))
    cases = {str(bad_json): "not valid JSON", str(broken): "not an ONNX model", str(empty): "holds no config.json",
             str(odd): "node 'odd' (Sin, node 1 of 2"}
    if OPS["attention"].param("kv_heads") is None:  # until grouped-query attention is in the catalogue
        cases[str(HF / "Meta-Llama-3-8B")] = "needs the attention op's kv_heads"
    for path, words in cases.items():
        line = one_error_line(runner.invoke(app, [command, path]))
        assert path in line and words in line, line


def test_seq_sets_the_sequence_of_info_predict_and_plan_and_the_plan_file_keeps_it(tmp_path):
    s, d, kv, f, v = 2048, 4096, 1024, 14336, 128256
    # matmul MACs a sequence (networks/zoo/llama3-8b.yaml's formula at S=2048)
    macs = 32 * (s * d * (2 * d + 2 * kv) + 2 * s * s * d + 3 * s * d * f) + s * d * v
    for network in ("llama3-8b", str(HF / "Meta-Llama-3-8B")):
        result = runner.invoke(app, ["info", network, "--seq", str(s), "--json"])
        assert result.exit_code == 0, result.output
        totals = json.loads(result.stdout)["totals"]
        assert (totals["params"], totals["macs_per_sample"]) == (8_030_261_248, macs)
    short = load_network("llama3-8b", seq=2048)
    assert short.inputs[0].shape == (2048,) and short.layer("lm_head").out_shape == (2048, 128256)
    plan = tmp_path / "plan.yaml"
    planned = runner.invoke(app, ["plan", str(HF / "Meta-Llama-3-8B"), "--seq", "1024", "-p", "8", "-b", "16",
                                  "--machine", "dgx-h100", "--precision", "bf16", "--pipeline", "off", "--out", str(plan)])
    assert planned.exit_code == 0, planned.output
    assert "\nseq: 1024\n" in plan.read_text()
    again = runner.invoke(app, ["predict", str(plan), "--json"])
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    assert data["step_s"] == pytest.approx(data["plan"]["recorded_step_s"], rel=1e-9)
    direct = runner.invoke(app, ["predict", "llama3-8b", "--seq", "1024", "-p", "8", "-b", "16", "--machine",
                                 "dgx-h100", "--precision", "bf16", "--json"])
    assert direct.exit_code == 0 and json.loads(direct.stdout)["layers"][0]["name"] == "embed"
    assert "plan file" in one_error_line(runner.invoke(app, ["predict", str(plan), "--seq", "512"]))


@pytest.mark.parametrize("command", ["info", "predict", "plan"])
def test_seq_where_there_is_no_sequence_is_one_line(command):
    line = one_error_line(runner.invoke(app, [command, "resnet50", "--seq", "512"]))
    assert "--seq 512: resnet50 takes no sequence of tokens" in line and "'image' [3, 224, 224]" in line
    line = one_error_line(runner.invoke(app, [command, str(ONNX / "resnet50.onnx"), "--seq", "512"]))
    assert "--seq 512: the graph takes no sequence" in line
    assert "--seq" in one_error_line(runner.invoke(app, [command, "gpt2", "--seq", "0"]))


def test_an_empty_name_is_no_network_not_the_working_folder():
    assert "'' names no model to import" in one_error_line(runner.invoke(app, ["import", ""]))
    for command in (["info", ""], ["predict", "", "-p", "2"], ["plan", "", "-p", "2"]):
        assert "'' names no network" in one_error_line(runner.invoke(app, command))
