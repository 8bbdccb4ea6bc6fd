"""The plan's summary says what the model assumes of the framework where a user's may differ
(issue 55): the batch norm it assumes (synchronised, or --batch-norm local) for a network that has
it, and the attention kernels the plan chose, flash attention where the machine runs it (issue 52),
the unfused kernels where it does not."""

import json
import re

from typer.testing import CliRunner

from dnnplan.cli import app
from dnnplan.render.answer import mfu_note

runner = CliRunner()


def _assumes(*args: str) -> str:
    result = runner.invoke(app, ["plan", *args, "--pipeline", "off"], env={"COLUMNS": "400"})  # the whole batch's summary
    assert result.exit_code == 0, result.output
    text = re.sub(r"\s+", " ", result.output)  # the line as printed, wrapped at any width
    start = text.index("the model assumes:")
    return text[start:text.index("against the baselines", start)]


def test_a_transformer_on_an_h100_is_planned_with_flash_attention():
    line = _assumes("gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--precision", "bf16")
    assert "flash-attention kernel" in line and "not flash attention" not in line
    assert "batch-norm" not in line


def test_a_transformer_on_a_v100_is_planned_with_materialised_scores():
    line = _assumes("gpt-tiny", "-p", "4", "--machine", "dgx1-v100")
    assert "scores materialised" in line and "not flash attention" in line


def test_a_cnn_states_synchronised_batch_norm_and_no_attention():
    line = _assumes("resnet18", "-p", "4")
    assert "SyncBatchNorm" in line and "attention" not in line


def test_a_utilisation_over_100_percent_says_why():
    """resnet18 in fp32 on A100s takes FFT convolutions: fewer FLOPs than the model's count; under
    PyTorch, float32 convolutions run on the TF32 tensor cores, above the float32 peak counted."""
    assert mfu_note(0.99) == ""
    assert "FFT and Winograd" in mfu_note(1.158) and "TF32 tensor cores" in mfu_note(1.158)


def test_the_summary_says_which_batch_norm_the_plan_assumes():
    sync = _assumes("tests/assets/tinyres.yaml", "-p", "2", "-b", "8", "--machine", "dgx-a100")
    assert "synchronised" in sync and "--batch-norm local" in sync
    local = _assumes("tests/assets/tinyres.yaml", "-p", "2", "-b", "8", "--machine", "dgx-a100",
                     "--batch-norm", "local")
    assert "each rank's own samples" in local and "DDP" in local and "synchronised" not in local


def _summary(*args: str) -> str:
    result = runner.invoke(app, [*args], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.output)


def test_a_network_with_attention_trains_with_adam_unless_told_and_a_cnn_with_momentum():
    """The optimiser a transformer user expects: Adam for a network with attention (its two moments
    priced: more memory than momentum's one), momentum for the rest; the summary says it assumed
    it and why; a named --optimizer stands."""
    transformer = _summary("plan", "gpt-tiny", "-p", "4", "--json")
    assert '"optimizer": "adam"' in transformer
    said = _summary("plan", "gpt-tiny", "-p", "4")
    assert "assumed, the flag not given:" in said and "--optimizer adam (a network with attention)" in said
    assert '"optimizer": "momentum"' in _summary("plan", "gpt-tiny", "-p", "4", "--optimizer", "momentum", "--json")
    assert "--optimizer momentum;" in _summary("plan", "resnet18", "-p", "4") and \
        '"optimizer": "momentum"' in _summary("plan", "resnet18", "-p", "4", "--json")
    adam = _summary("predict", "gpt-tiny", "-p", "4", "--json")
    momentum = _summary("predict", "gpt-tiny", "-p", "4", "--optimizer", "momentum", "--json")
    optimizer_bytes = [int(re.search(r'"optimizer": (\d+)', out).group(1)) for out in (adam, momentum)]
    assert optimizer_bytes[0] == 2 * optimizer_bytes[1] > 0  # Adam's two moments against momentum's one


def test_a_network_with_attention_on_a_gpu_trains_in_16_bit_mixed_precision_unless_told():
    """The precision a transformer user expects on a GPU: bf16 (fp16 on a V100, which has no
    bfloat16 peak), said in the summary; a named --precision stands; a CNN, a CPU (machine local)
    and a profile table keep fp32."""
    said = _summary("plan", "gpt-tiny", "-p", "4", "--machine", "dgx-h100")
    assert "--precision bf16 (a network with attention on a GPU)" in said
    planned = json.loads(runner.invoke(app, ["plan", "gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--json"]).stdout)
    assert planned["precision"] == "bf16" and "--precision bf16 (a network with attention on a GPU)" in planned["assumed"]
    assert '"precision": "fp16"' in _summary("plan", "gpt-tiny", "-p", "4", "--machine", "dgx1-v100", "--json")
    assert '"precision": "fp32"' in _summary("plan", "gpt-tiny", "-p", "4", "--machine", "dgx-h100",
                                              "--precision", "fp32", "--json")
    assert '"precision": "fp32"' in _summary("plan", "resnet18", "-p", "4", "--machine", "dgx-h100", "--json")
    assert "--precision fp32;" in _summary("plan", "resnet18", "-p", "4", "--machine", "dgx-h100")
    assert '"precision": "fp32"' in _summary("plan", "gpt-tiny", "-p", "2", "--machine", "local", "--json")
    bf16 = _summary("predict", "gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--json")
    fp32 = _summary("predict", "gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--precision", "fp32", "--json")
    steps = [float(re.search(r'"step_s": ([0-9.e-]+)', out).group(1)) for out in (bf16, fp32)]
    assert steps[0] < steps[1]  # the tensor cores' 16-bit peak against the CUDA cores' float32


def test_a_profile_table_prices_its_own_precision_unless_told():
    """With --profile and no --precision, the plan is in the precision the table was timed in (a
    table prices nothing else), said in the summary; a named other precision is refused in one line."""
    said = _summary("plan", "resnet18", "-p", "4", "--machine", "dgx-h100", "--profile", "h100-tf32")
    assert "--precision tf32 (the profile table's)" in said
    assert '"precision": "bf16"' in _summary("plan", "gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--profile",
                                              "h100-bf16", "--json")
    refused = runner.invoke(app, ["plan", "resnet18", "-p", "4", "--machine", "dgx-h100", "--profile", "h100-tf32",
                                  "--precision", "fp32"])
    assert refused.exit_code == 2 and "timed in tf32, the plan is for fp32" in refused.output


def test_predict_says_what_it_assumed_as_plan_does():
    """`predict NETWORK` names the precision and optimiser it priced and the flags it assumed, in its
    summary and its JSON, as `plan` does; a plan file's prediction names the file's."""
    said = _summary("predict", "gpt-tiny", "-p", "4", "--machine", "dgx-h100")
    assert "assumed, the flag not given: --precision bf16 (a network with attention on a GPU); --optimizer adam" in said
    data = json.loads(runner.invoke(app, ["predict", "gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--optimizer",
                                          "momentum", "--json"]).stdout)
    assert (data["precision"], data["optimizer"]) == ("bf16", "momentum")
    assert "--precision bf16 (a network with attention on a GPU)" in data["assumed"]
    assert not any(a.startswith("--optimizer") for a in data["assumed"])
    piped = json.loads(runner.invoke(app, ["predict", "gpt-tiny", "-p", "4", "--machine", "dgx-h100", "--pipeline", "2",
                                           "--micro-batches", "2", "--precision", "fp32", "--json"]).stdout)
    assert piped["precision"] == "fp32" and not any(a.startswith("--precision") for a in piped["assumed"])
