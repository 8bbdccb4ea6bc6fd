"""Frameworks as data (costmodel.frameworks): every shipped file loads, a user's file loads by path,
a mistake is one line naming the file, the line and the key; the default framework prices exactly
as the cost model's kernels and an idle host; the framework's overlap never goes below physics."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.comm.overlap import Overlap, overlapped
from costmodel.frameworks.framework import framework_from_dict
from costmodel.frameworks.loading import DEFAULT_FRAMEWORK, load_framework, shipped_framework_names
from costmodel.choices.training import DEFAULT_FRAMEWORK as CHOICES_DEFAULT
from costmodel.layer.comms import Comm
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network
from tests.support.cli_errors import one_error_line

runner = CliRunner()
SHIPPED = ("deepspeed", "dnnplan", "dnnplan-graphs", "ideal", "megatron", "pytorch", "pytorch-compile")


def test_every_shipped_framework_loads_and_the_default_is_todays_pricing():
    assert set(SHIPPED) <= set(shipped_framework_names())
    for name in SHIPPED:
        assert load_framework(name).name == name
    assert DEFAULT_FRAMEWORK == CHOICES_DEFAULT == "ideal"
    assert load_framework("ideal").as_today and not load_framework("pytorch").as_today
    # PyTorch runs float32 convolutions on TF32 unless told otherwise (cudnn.allow_tf32 defaults to True)
    assert load_framework("pytorch").float32_convolutions == "tf32"
    assert load_framework("pytorch").float32_matmuls == "float32"
    # ... and keeps tensors contiguous NCHW unless a model is moved to channels last
    assert load_framework("pytorch").convolution_layout == "nchw" and load_framework("ideal").convolution_layout == "nhwc"


@pytest.mark.parametrize("text, key", [
    ("name: x\nabout: y\nhost:\n  launch_us: 3\n", "host.launch_us"),
    ("name: x\nabout: y\nspeed: 2\n", "speed"),
    ("name: x\nabout: y\nhost:\n  launch_s: -1\n", "host.launch_s"),
    ("name: x\nabout: y\nhost:\n  launch_s: fast\n", "host.launch_s"),
    ("name: x\nabout: y\nkernels:\n  convolution: {fwd: 1}\n", "kernels.convolution"),
    ("name: x\nabout: y\nkernels:\n  attention.fast: {fwd: 1}\n", "kernels.attention.fast"),
    ("name: x\nabout: y\nkernels:\n  linear: {fwd: 1.5}\n", "kernels.linear.fwd"),
    ("name: x\nabout: y\nhost:\n  op_s: {value: 1.0e-5, basis: guessed}\n", "host.op_s.basis"),
    ("name: x\nabout: y\nhost:\n  cuda_graphs: sometimes\n", "host.cuda_graphs"),
    ("name: x\nabout: y\noverlap:\n  tensor: 1.5\n", "overlap.tensor"),
    ("name: x\nabout: y\nprecision:\n  float32_convolutions: fp16\n", "precision.float32_convolutions"),
    ("name: x\nabout: y\nmemory:\n  allocator: 0.5\n", "memory.allocator"),
    ("name: x\nabout: y\nkernels:\n  moe: {fwd: 2, sync_after: -1}\n", "kernels.moe.sync_after"),
    ("name: x\nabout: y\nkernels:\n  moe: {fwd: 2, launch_s: 2}\n", "kernels.moe.launch_s"),
    ("name: x\nabout: y\nkernels:\n  moe: {fwd: 2, small: 1.5}\n", "kernels.moe.small"),
    ("name: x\nabout: y\nkernels:\n  moe: {per_local_expert: {fwd: 2, bwd: -1}}\n", "kernels.moe.per_local_expert.bwd"),
    ("name: x\nabout: y\nkernels:\n  moe: {per_local_expert: {fwd: 2}}\n", "kernels.moe.per_local_expert"),
    ("name: x\nabout: y\nkernels:\n  moe: {per_local_expert: {fwd: 2, bwd: 4, gemm: 1}}\n",
     "kernels.moe.per_local_expert.gemm"),
    ("name: x\nabout: y\nkernels:\n  conv2d: {peak_fraction: 1.5}\n", "kernels.conv2d.peak_fraction"),
    ("name: x\nabout: y\nlayout:\n  convolutions: chw\n", "layout.convolutions"),
    ("name: x\nabout: y\nlayout:\n  linear: nchw\n", "layout.linear"),
    ("name: x\nabout: y\nlayout:\n  transposes: -1\n", "layout.transposes"),
    ("name: x\nabout: y\nkernels:\n  attention: {kept: many}\n", "kernels.attention.kept"),
    ("name: x\nabout: y\nkernels:\n  attention: {kept_stored: -1}\n", "kernels.attention.kept_stored"),
    ("name: x\nabout: y\nkernels:\n  conv2d: {workspace: -0.5}\n", "kernels.conv2d.workspace"),
    ("name: x\nabout: y\nkernels:\n  softmax_cross_entropy: {grad_copies: two}\n",
     "kernels.softmax_cross_entropy.grad_copies"),
    ("name: x\nabout: y\nmemory:\n  grads_in_backward: sometimes\n", "memory.grads_in_backward"),
    ("name: x\nabout: y\ncontext_parallel:\n  exchange: gossip\n", "context_parallel.exchange"),
    ("name: x\nabout: y\ncontext_parallel:\n  rotate: ring\n", "context_parallel.rotate"),
    ("about: y\n", "name"),
    # a count of billions of launches would hold the machine's memory before any answer
    ("name: x\nabout: y\nkernels:\n  layernorm: {fwd: 1000000000, bwd: 3}\n", "kernels.layernorm.fwd"),
    ("name: x\nabout: y\nhost:\n  update_launches: 10001\n", "host.update_launches"),
    ("name: x\nabout: y\nkernels:\n  moe: {per_local_expert: {fwd: 2, bwd: 99999999999999999999}}\n",
     "kernels.moe.per_local_expert.bwd"),
])
def test_a_mistake_is_one_line_naming_the_file_line_and_key(tmp_path, text, key):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(DnnplanError) as err:
        load_framework(str(path))
    line = str(err.value)
    assert "\n" not in line and str(path) in line and f"field '{key}'" in line
    if key != "name":  # the line of the key's file (a missing key has none)
        assert f"{path}:{text.count(chr(10))}, field" in line or key.count(".") > 1


def test_an_unknown_op_kind_is_answered_with_the_ops_the_file_may_name(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: x\nabout: y\nkernels:\n  linearr: {fwd: 1}\n")
    with pytest.raises(DnnplanError) as err:
        load_framework(str(path))
    assert "linear, maxpool2d" in str(err.value) and "attention.flash" in str(err.value)


def test_a_users_file_by_path_prices_the_step(tmp_path):
    path = tmp_path / "slow-host.yaml"
    path.write_text("name: slow-host\nabout: a host ten times slower than eager PyTorch's\n"
                    "host:\n  op_s: {value: 5.0e-4, basis: measured, source: my profile}\n  launch_s: 5.0e-5\n")
    fw = load_framework(str(path))
    assert fw.host.op_s.basis == "measured" and fw.host.op_s.source == "my profile"
    got = {}
    for name in ("ideal", str(path)):
        result = runner.invoke(app, ["predict", "resnet18", "-p", "1", "-b", "8", "--machine", "dgx-h100",
                                     "--framework", name, "--json"])
        assert result.exit_code == 0, result.output
        got[name] = json.loads(result.output)
    assert got[str(path)]["framework"] == str(path)
    assert got[str(path)]["host_s"] > 0 and got[str(path)]["host_bound_layers"]
    assert got[str(path)]["step_s"] > got["ideal"]["step_s"]
    assert got["ideal"]["host_s"] == 0


def test_the_summary_names_the_framework_and_a_bad_one_is_one_line():
    result = runner.invoke(app, ["predict", "resnet18", "-p", "1", "-b", "8", "--machine", "dgx-h100",
                                 "--framework", "pytorch"])
    assert result.exit_code == 0, result.output
    assert "framework: pytorch (eager PyTorch" in result.output
    line = one_error_line(runner.invoke(app, ["predict", "resnet18", "--framework", "pytorh"]))
    assert "unknown --framework 'pytorh'" in line and "did you mean 'pytorch'" in line
    line = one_error_line(runner.invoke(app, ["predict", "resnet18", "--runtime", "deepspeed", "--framework",
                                              "pytorch"]))
    assert "name different frameworks" in line


def test_runtime_deepspeed_is_the_zero3_framework():
    args = ["predict", "gpt-tiny", "-p", "8", "-b", "8", "--zero", "3", "--json"]
    by_runtime = runner.invoke(app, args + ["--runtime", "deepspeed"])
    by_framework = runner.invoke(app, args + ["--framework", "deepspeed"])
    assert by_runtime.exit_code == 0 and by_framework.exit_code == 0, by_runtime.output + by_framework.output
    assert json.loads(by_runtime.output)["step_s"] == json.loads(by_framework.output)["step_s"]


def test_a_framework_overlap_efficiency_never_goes_below_physics():
    layer = next(layer for layer in load_network("gpt2").layers if layer.op == "linear")
    comms = (Comm("grad_sync", "sync", "allreduce", 1, 2, 0.8e-3), Comm("input_grad", "bwd", "allreduce", 1, 2, 0.8e-3))
    window = {"fwd": 0.0, "bwd": 1e-3}
    full = sum(c.seconds for c in overlapped(comms, layer, window, Overlap("all"), front=False))
    previous = full
    for eff in (1.0, 0.75, 0.5, 0.25, 0.0):
        got = overlapped(comms, layer, window, Overlap("all", efficiency=(("data", eff), ("tensor", eff))), front=False)
        exposed = sum(c.seconds for c in got)
        # compute + exposed never below max(compute, communication), and less efficient never faster
        assert window["bwd"] + exposed >= max(window["bwd"], 1.6e-3) - 1e-15
        assert exposed >= previous - 1e-15
        previous = exposed
    assert full == pytest.approx(0.6e-3) and previous == pytest.approx(1.6e-3)
    # one efficiency per overlap: the tensor-parallel one alone at 0 exposes that collective whole
    got = overlapped(comms, layer, window, Overlap("all", efficiency=(("tensor", 0.0),)), front=False)
    assert got[1].seconds == pytest.approx(0.8e-3) and got[0].seconds == pytest.approx(0.8e-3 * (1 - 1e-3 / 1.6e-3))


def test_device_factors_change_only_the_kernels_they_name():
    fw = framework_from_dict({"name": "x", "about": "y", "kernels": {"default": {"device": 2.0},
                                                                  "linear": {"fwd": 1, "device": 1.0}}})
    assert fw.op("relu").device == 2.0 and fw.op("linear").device == 1.0
    assert fw.op("attention", "flash").device == 2.0 and fw.prices_device


def _local(net: str, op: str, precision: str, batch: int = 4):
    from costmodel.choices.precision import with_precision
    from costmodel.parallel.shard import local_layer
    from costmodel.parallel.strategy import Strategy
    layer = next(layer for layer in with_precision(load_network(net), precision).layers if layer.op == op)
    return local_layer(layer, Strategy(1), batch)


def test_extra_passes_read_and_write_the_scores_once_each_in_every_precision():
    from costmodel.compute.roofline import Roofline
    from costmodel.frameworks.kernels import FrameworkKernels
    from costmodel.machine.loading import load_machine
    h100 = load_machine("dgx-h100")
    fw = framework_from_dict({"name": "x", "about": "y", "kernels": {"attention.materialized": {"passes": 3}}})
    dev = h100.device
    for precision in ("bf16", "fp32"):
        local = _local("gpt2", "attention", precision)
        plain, priced = Roofline(h100), FrameworkKernels(Roofline(h100), fw, h100)
        heads, seq = local.p["heads"], local.in_shapes[0][0]
        scores = local.batch * heads * seq * seq * 4  # float32, as autocast's softmax
        extra = 3 * 2 * scores / (dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory"))
        for pass_ in ("fwd", "bwd_data"):
            assert priced.pass_s(local, pass_, "materialized") == pytest.approx(
                plain.pass_s(local, pass_, "materialized") + extra, rel=1e-12)
        # flash attention has no scores in memory: the entry names the materialised kernels only
        assert priced.pass_s(local, "fwd", "flash") == plain.pass_s(local, "fwd", "flash")


def test_pytorch_runs_float32_convolutions_on_tf32_and_float32_matmuls_not():
    from costmodel.compute.roofline import Roofline
    from costmodel.frameworks.kernels import FrameworkKernels
    from costmodel.machine.loading import load_machine
    h100 = load_machine("dgx-h100")
    fw = framework_from_dict({"name": "x", "about": "y", "precision": {"float32_convolutions": "tf32"}})
    priced, fp32, tf32 = FrameworkKernels(Roofline(h100), fw, h100), Roofline(h100), Roofline(h100, tf32=True)
    conv, linear = _local("resnet18", "conv2d", "fp32", 64), _local("gpt2", "linear", "fp32")
    assert priced.pass_s(conv, "fwd", "") == tf32.pass_s(conv, "fwd", "") < fp32.pass_s(conv, "fwd", "")
    assert priced.pass_s(linear, "fwd", "") == fp32.pass_s(linear, "fwd", "")


def test_a_plan_file_records_the_framework_and_its_prediction_prices_it(tmp_path):
    out = tmp_path / "plan.yaml"
    args = ["plan", "lenet5", "-p", "1", "-b", "32", "--machine", "dgx-h100", "--time-limit", "30"]
    result = runner.invoke(app, args + ["--framework", "pytorch", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "framework: pytorch" in result.output and "framework: pytorch" in out.read_text()
    predicted = runner.invoke(app, ["predict", str(out), "--json"])
    assert predicted.exit_code == 0, predicted.output
    assert json.loads(predicted.output)["host_s"] > 0  # lenet5's small layers: eager PyTorch's host binds
    default = runner.invoke(app, args + ["--out", str(tmp_path / "default.yaml")])
    assert default.exit_code == 0 and "framework" not in (tmp_path / "default.yaml").read_text()
    # a plan file's framework or overlap edited to one that is not: one line naming the file and the field
    for edit, says in (("framework: tensorflow", "field 'framework': unknown framework 'tensorflow'"),
                       ("overlap: bogus", "field 'overlap': unknown overlap 'bogus'"),
                       ("overlap: data@-5", "field 'overlap': unknown overlap 'data@-5'")):
        key = edit.split(":")[0]
        lines = [line for line in out.read_text().splitlines() if not line.startswith(key + ":")]
        edited = tmp_path / "edited.yaml"
        edited.write_text("\n".join(lines + [edit]) + "\n")
        got = runner.invoke(app, ["predict", str(edited)])
        assert got.exit_code == 2 and says in got.output and "edited.yaml" in got.output, got.output


def _h100_conv(precision: str, batch: int = 64):
    from costmodel.compute.roofline import Roofline
    from costmodel.machine.loading import load_machine
    h100 = load_machine("dgx-h100")
    conv = next(local for local in (_local_at("vgg16", i, precision, batch) for i in range(40))
                if local.layer.op == "conv2d" and local.in_shapes[0][0] == 256)  # a wide 3x3 convolution
    return h100, Roofline(h100, tf32=precision == "tf32"), conv


def _local_at(net: str, index: int, precision: str, batch: int):
    from costmodel.choices.precision import with_precision
    from costmodel.parallel.shard import local_layer
    from costmodel.parallel.strategy import Strategy
    return local_layer(with_precision(load_network(net), precision).layers[index], Strategy(1), batch)


def test_a_peak_fraction_prices_compute_bound_kernels_at_that_fraction_of_the_format_peak_in_every_format():
    from costmodel.frameworks.kernels import FrameworkKernels
    fw = framework_from_dict({"name": "x", "about": "y", "kernels": {"conv2d": {"peak_fraction": 0.4}}})
    rates = {}
    for precision, peak in (("tf32", "tf32"), ("bf16", "bfloat16"), ("fp32", "float32")):
        h100, roofline, conv = _h100_conv(precision)
        flops = 2 * 64 * conv.out_shape[0] * conv.out_shape[1] * conv.out_shape[2] * conv.in_shapes[0][0] * 9
        got = FrameworkKernels(roofline, fw, h100).pass_s(conv, "fwd", "")
        assert got == pytest.approx(flops / (h100.device.peak_flops[peak] * 0.4), rel=0.02)  # compute-bound
        rates[precision] = flops / got
    # one fraction for every format: bf16 runs as much faster as its peak is (2x), not 0.73 / 0.23 more;
    # float32 on the CUDA cores too (in place of the machine's cuda_cores efficiency)
    assert rates["bf16"] / rates["tf32"] == pytest.approx(989.5 / 494.5, rel=0.02)
    assert rates["tf32"] / rates["fp32"] == pytest.approx(494.5 / 67, rel=0.02)
    # other ops keep the machine's classes
    h100, roofline, _ = _h100_conv("bf16")
    linear = _local("gpt2", "linear", "bf16", 8)
    assert FrameworkKernels(roofline, fw, h100).pass_s(linear, "fwd", "") == roofline.pass_s(linear, "fwd", "")


def test_nchw_convolutions_on_the_tensor_cores_pay_one_transpose_of_their_operands_a_pass():
    from costmodel.frameworks.kernels import FrameworkKernels
    nchw = framework_from_dict({"name": "x", "about": "y", "layout": {"convolutions": "nchw"}})
    nhwc = framework_from_dict({"name": "x", "about": "y", "layout": {"convolutions": "nhwc"}})
    h100, roofline, conv = _h100_conv("bf16")
    dev = h100.device
    operands = 64 * (conv.in_shapes[0][0] * conv.in_shapes[0][1] * conv.in_shapes[0][2]
                     + conv.out_shape[0] * conv.out_shape[1] * conv.out_shape[2]) * 2
    transpose = 2 * operands / (dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory"))
    half = framework_from_dict({"name": "x", "about": "y", "layout": {"convolutions": "nchw", "transposes": 0.5}})
    for pass_ in ("fwd", "bwd_data", "bwd_weights"):
        plain = FrameworkKernels(roofline, nhwc, h100).pass_s(conv, pass_, "")
        assert plain == roofline.pass_s(conv, pass_, "")
        assert FrameworkKernels(roofline, nchw, h100).pass_s(conv, pass_, "") == pytest.approx(plain + transpose)
        assert FrameworkKernels(roofline, half, h100).pass_s(conv, pass_, "") == pytest.approx(plain + transpose / 2)
    # strict float32 runs on the CUDA cores, whose kernels take NCHW as it is: no transposes
    h100, roofline, conv = _h100_conv("fp32")
    assert FrameworkKernels(roofline, nchw, h100).pass_s(conv, "fwd", "") == roofline.pass_s(conv, "fwd", "")


def test_kept_copies_of_the_float32_scores_add_to_the_layers_activations_unless_recomputed():
    from costmodel.compute.roofline import Roofline
    from costmodel.frameworks.kernels import FrameworkKernels
    from costmodel.layer.cost import framework_kept_bytes
    from costmodel.machine.loading import load_machine
    h100 = load_machine("dgx-h100")
    fw = framework_from_dict({"name": "x", "about": "y", "kernels": {"attention.materialized": {"kept": 1.25}}})
    priced = FrameworkKernels(Roofline(h100), fw, h100)
    local = _local("gpt2", "attention", "bf16", 8)
    heads, seq = 12, 1024
    scores = 8 * heads * seq * seq * 4  # float32, as autocast runs the softmax
    assert priced.kept_bytes(local, "materialized") == int(1.25 * scores)
    assert Roofline(h100).kept_bytes(local, "materialized") == 0  # the cost model's kernels: its own count
    assert priced.kept_bytes(local, "flash") == 0  # the entry names the materialised kernels only
    assert framework_kept_bytes(priced, local, "materialized") == int(1.25 * scores)
    assert framework_kept_bytes(priced, local, "materialized+recompute") == 0


def test_kept_stored_copies_are_the_scores_in_the_layers_own_format():
    from costmodel.compute.roofline import Roofline
    from costmodel.frameworks.kernels import FrameworkKernels
    from costmodel.machine.loading import load_machine
    h100 = load_machine("dgx-h100")
    fw = framework_from_dict({"name": "x", "about": "y", "kernels": {
        "attention.materialized": {"kept": 0.25, "kept_stored": 1.0}}})
    scores = 8 * 12 * 1024 * 1024
    for precision, item in (("bf16", 2), ("fp32", 4)):
        local = _local("gpt2", "attention", precision, 8)
        # dropout's 1-byte mask (a quarter of the float32 scores) and the raw scores in the layer's format
        assert FrameworkKernels(Roofline(h100), fw, h100).kept_bytes(local, "materialized") == scores * (1 + item)


def test_a_frameworks_workspace_share_and_gradient_copies_are_its_layers_transient():
    from costmodel.frameworks.kernels import FrameworkKernels
    h100, roofline, conv = _h100_conv("bf16")
    plain = roofline.workspace_bytes(conv, "im2col")
    assert plain > 0
    for share in (0.0, 0.5):
        fw = framework_from_dict({"name": "x", "about": "y", "kernels": {"conv2d": {"workspace": share}}})
        assert FrameworkKernels(roofline, fw, h100).workspace_bytes(conv, "im2col") == int(share * plain)
    loss = _local("gpt2", "softmax_cross_entropy", "bf16", 8)
    fw = framework_from_dict({"name": "x", "about": "y", "kernels": {"softmax_cross_entropy": {"grad_copies": 1.0}}})
    logits = 8 * 1024 * 50257 * 4  # the logits' gradient in float32, as the loss runs under mixed precision
    assert roofline.workspace_bytes(loss, "") == 0
    assert FrameworkKernels(roofline, fw, h100).workspace_bytes(loss, "") == logits
    assert FrameworkKernels(roofline, fw, h100).workspace_bytes(conv, "im2col") == plain  # other ops as priced
