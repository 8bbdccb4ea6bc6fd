"""GPU profile tables on the CPU: the precision and the engine records a table keeps, which plans
may use which table (precision, GPU model, --foreign-profile), the engines a run pins, and the one
line a GPU command without cupy or cuDNN ends in."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import local_layer
from costmodel.compute.profile_table import (Entry, ProfileTable, fingerprint_id, foreign_reason, merge,
                                             table_from_dict, table_to_dict)
from costmodel.compute.profiled import ProfiledCompute
from costmodel.frameworks.uniform import data_strategy
from dnnplan.cli import app
from executor.backend.select import array_backend_for, engine_pins
from kernels.cuda import conv, libs
from kernels.xp import gpu_available
from networks.errors import DnnplanError
from networks.loader import load_network
from profiler import context
from profiler.tables.compatibility import gpu_model
from profiler.tables.store import write_table

GPU_FP = {"backend": "cupy", "device": "NVIDIA H100 80GB HBM3", "cores": 132, "threads": 1,
          "memory_bytes": 85520809984, "precision": "bf16"}
E = Entry(1e-4, 1e-4, 0.01, 5, 10**9, 10**6)


def _conv_calls(dtype="bfloat16", algo="winograd"):
    net = load_network("resnet18")
    layer = next(l for l in net.layers if l.op == "conv2d" and l.p["kernel"] == (3, 3) and l.p["stride"] == (1, 1))
    layer = type(layer)(**{**layer.__dict__, "dtype": dtype})
    local = local_layer(layer, data_strategy(layer, 1, 8), 8)
    return local, [c for p in ("fwd", "bwd_data", "bwd_weights") for c in kernel_calls(local, p, algo)]


def _gpu_table(tmp_path, precision="bf16"):
    local, calls = _conv_calls("bfloat16" if precision == "bf16" else "float32")
    records = {c.key: {"engine": f"eng{i}_k2=1", "workspace_bytes": 1000 * (i + 1), "ran": "winograd"}
               for i, c in enumerate(calls)}
    table = ProfileTable({**GPU_FP, "precision": precision}, {c.key: E for c in calls}, {}, str(tmp_path / "t.json"),
                         records=records)
    write_table(table, tmp_path / "t.json")
    return tmp_path / "t.json", local, calls


def test_records_round_trip_and_are_checked(tmp_path):
    path, _, calls = _gpu_table(tmp_path)
    data = json.loads(path.read_text())
    again = table_from_dict(data, "x")
    assert again.records == table_from_dict(table_to_dict(again), "y").records and len(again.records) == 3
    data["records"][calls[0].key]["workspace_bytes"] = -1
    with pytest.raises(DnnplanError, match="record"):
        table_from_dict(data, "x")
    data["records"] = {"nokernel|1|float32|": {"engine": "e", "workspace_bytes": 1, "ran": "im2col"}}
    with pytest.raises(DnnplanError, match="record"):
        table_from_dict(data, "x")


def test_precision_is_part_of_a_tables_identity_and_fp32_tables_keep_their_ids():
    fp32 = {k: v for k, v in GPU_FP.items() if k != "precision"}
    assert fingerprint_id(fp32) == fingerprint_id({**fp32, "precision": "fp32"})
    assert fingerprint_id({**fp32, "precision": "tf32"}) != fingerprint_id(fp32)
    assert foreign_reason({**fp32, "precision": "tf32"}, fp32) == "precision tf32 != fp32"
    with pytest.raises(DnnplanError, match="precision"):
        merge(ProfileTable({**fp32, "precision": "tf32"}), ProfileTable(fp32))


def test_a_gpu_tables_workspace_prices_the_convolution(tmp_path):
    path, local, calls = _gpu_table(tmp_path)
    compute = context.compute_model(load_machine("dgx-h100"), str(path), precision="bf16")
    assert compute.workspace_bytes(local, "winograd") == 3000  # the largest pass's recorded workspace
    roof = Roofline(load_machine("dgx-h100"))
    assert ProfiledCompute(ProfileTable(GPU_FP), roof).workspace_bytes(local, "winograd") == \
        roof.workspace_bytes(local, "winograd")  # no record: the closed form


def test_a_table_prices_only_plans_in_its_precision(tmp_path):
    path, _, _ = _gpu_table(tmp_path, "bf16")
    with pytest.raises(DnnplanError, match="timed in bf16, the plan is for tf32") as err:
        context.compute_model(load_machine("dgx-h100"), str(path), precision="tf32")
    assert "--precision tf32" in err.value.hint


def test_a_table_of_another_gpu_is_refused_unless_asked_for(tmp_path):
    path, _, _ = _gpu_table(tmp_path)
    assert gpu_model("NVIDIA H100 80GB HBM3") == "H100" and gpu_model("A100 SXM4 40GB") == "A100"
    assert gpu_model("auto") is None and gpu_model("AMD EPYC 7763 64-Core Processor") is None
    with pytest.raises(DnnplanError, match="H100.*A100") as err:
        context.compute_model(load_machine("dgx-a100"), str(path), precision="bf16")
    assert "--foreign-profile" in err.value.hint
    compute = context.compute_model(load_machine("dgx-a100"), str(path), precision="bf16", foreign_ok=True)
    assert "kernel times of another GPU" in compute.name


def test_a_gpu_run_pins_the_engines_its_table_recorded(tmp_path):
    path, _, calls = _gpu_table(tmp_path)
    table = context.compute_model(load_machine("dgx-h100"), str(path), precision="bf16").table
    pins = engine_pins(table)
    assert len(pins) == 3
    fwd = calls[0]
    key = conv.pin_key("fwd", fwd.shape[:16], "bfloat16", "winograd", "bf16")
    assert pins[key] == "eng0_k2=1"
    assert array_backend_for("auto", table) == "cupy" and array_backend_for("host", table) == "numpy"
    assert array_backend_for("auto", None) == "numpy" and array_backend_for("cuda", None) == "cupy"
    with pytest.raises(DnnplanError, match="--device"):
        array_backend_for("tpu", table)


def test_cudnn_libraries_are_found_in_the_cuda13_wheels_layout(tmp_path):
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    for name in ("libcudnn.so.9", "libcudnn_adv.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcublas.so.13"):
        (lib / name).write_bytes(b"")
    found = libs.cudnn_library_paths([str(tmp_path)])
    assert [p.rsplit("/", 1)[1] for p in found] == ["libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_adv.so.9",
                                                    "libcudnn.so.9"]  # what they need before them
    assert libs.cudnn_library_paths([str(tmp_path / "none")]) == []


@pytest.mark.skipif(gpu_available(), reason="a GPU is here")
@pytest.mark.parametrize("args", [
    ["profile", "lenet5", "--backend", "cupy"],
    ["profile", "lenet5", "--precision", "bf16"],
    ["profile-comm", "--ranks", "2", "--backend", "cupy"],
])
def test_gpu_commands_without_a_gpu_end_in_one_line(args, tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [l for l in result.output.strip().splitlines() if l.strip()]
    assert len(lines) <= 2 and "Traceback" not in result.output  # the message and its hint
    assert "dnnplan[gpu" in result.output or "--backend cupy" in result.output


@pytest.mark.skipif(gpu_available(), reason="a GPU is here")
def test_a_plan_run_on_gpus_without_one_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path))
    plan = tmp_path / "plan.yaml"
    made = CliRunner().invoke(app, ["plan", "lenet5", "-p", "1", "-b", "8", "--machine", "dgx-h100",
                                    "--no-recompute", "--out", str(plan)])
    assert made.exit_code == 0, made.output
    result = CliRunner().invoke(app, ["execute", str(plan), "--ranks", "1", "--device", "cuda"])
    assert result.exit_code == 2 and "dnnplan[gpu" in result.output and "Traceback" not in result.output


def test_a_missing_cudnn_frontend_or_library_is_one_line(monkeypatch):
    monkeypatch.setattr(libs, "cupy", lambda: object())
    monkeypatch.setattr(libs, "cudnn_library_paths", lambda roots=None: [])

    def no_cudnn(name):
        raise ImportError(f"No module named '{name}'")

    monkeypatch.setattr(libs.importlib, "import_module", no_cudnn)
    with pytest.raises(DnnplanError, match="cudnn") as err:
        libs.cudnn.__wrapped__()
    assert "nvidia-cudnn-frontend==1.16.0" in err.value.hint and "\n" not in str(err.value)
    with pytest.raises(DnnplanError, match="nccl") as err:
        libs.nccl.__wrapped__()
    assert "nvidia-nccl" in err.value.hint
