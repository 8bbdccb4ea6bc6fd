"""bench/frameworks/bench_conv_layers.py: the H100 CNN steps' convolutions layer by layer (docs/VALIDATION.md,
"Convolutions layer by layer"), and the dgx-h100 CUDA-core efficiency the same H100 measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.machine.loading import load_machine
from networks.loader import load_network
from tests.support.bench import load_bench

ASSETS = Path(__file__).resolve().parents[2] / "bench" / "assets"


def test_every_zoo_convolution_and_classifier_is_of_kind_convolution():
    bench = load_bench("bench_conv_layers")
    for name, expected in (("resnet50", 53 + 1), ("vgg16", 13 + 3)):  # convolutions + classifier GEMMs
        kinds = [bench.layer_kind(layer.name) for layer in load_network(name).layers]
        assert kinds.count("convolution") == expected
        assert kinds.count("batch norm") == (53 if name == "resnet50" else 0)


def test_the_timed_kernels_split_by_kind_without_losing_time():
    bench = load_bench("bench_conv_layers")
    row = next(r for r in json.loads((ASSETS / "h100_torch_steps_kernels.json").read_text())["rows"]
               if r["name"] == "resnet50-b256-fp16")
    kinds: dict[str, float] = {}
    for name, _count, seconds in row["kernels"]:
        kinds[bench.kernel_kind(name)] = kinds.get(bench.kernel_kind(name), 0.0) + seconds
    assert sum(kinds.values()) == pytest.approx(sum(s for _n, _c, s in row["kernels"]))
    assert bench.kernel_kind("sm90_xmma_fprop_implicit_gemm_f16f16") == "convolution"
    assert bench.kernel_kind("void cudnn::batchnorm_fwtr_nhwc_semiPersist<__half>") == "batch norm"
    # the convolutions and batch norm are the two largest kinds, each about a third of the step
    assert 0.25 < kinds["convolution"] / row["median_s"] < 0.4
    assert 0.25 < kinds["batch norm"] / row["median_s"] < 0.4


def test_the_h100_cuda_core_efficiency_is_its_measured_float32_gemm():
    ceilings = json.loads((ASSETS / "h100_torch_steps_kernels.json").read_text())["ceilings"]
    device = load_machine("dgx-h100").device
    measured = ceilings["gemm_fp32_flops"] / device.peak_flops["float32"]
    assert device.efficiency_of("cuda_cores") == pytest.approx(measured, abs=0.001)
