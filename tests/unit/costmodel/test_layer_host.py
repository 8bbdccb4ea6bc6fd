"""A layer's host time the device cannot hide, per layer (costmodel.frameworks.layer_host): what
the planner weighs of a framework's host, and what a step's prediction replaces by its timeline."""

from __future__ import annotations

import pytest

from costmodel.compute.roofline import Roofline
from costmodel.frameworks.framework import framework_from_dict
from costmodel.frameworks.kernels import FrameworkKernels, framework_kernels
from costmodel.frameworks.layer_host import layer_host_excess_s, pass_excess_s
from costmodel.frameworks.loading import load_framework
from costmodel.machine.loading import load_machine
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import Strategy
from networks.loader import load_network


def _local(net: str, op: str, batch: int):
    layer = next(x for x in load_network(net).layers if x.op == op)
    return local_layer(layer, Strategy(1), batch)


def _host(**host):
    return framework_from_dict({"name": "x", "about": "y", "kernels": {"default": {"fwd": 2, "bwd": 3}},
                                "host": host})


def test_a_pass_waits_for_its_issue_only_where_the_host_is_slower():
    assert pass_excess_s(5e-5, 2e-5) == pytest.approx(3e-5)
    assert pass_excess_s(2e-5, 5e-5) == 0.0


def test_a_small_layers_excess_is_its_issue_less_its_kernels_and_large_kernels_hide_it():
    h100 = load_machine("dgx-h100")
    compute = Roofline(h100)
    fw = _host(op_s=1e-4, launch_s=1e-5, launch_gap_s=1e-6)
    small = _local("resnet18", "batchnorm2d", 1)
    fwd = compute.pass_s(small, "fwd", "")
    bwd = compute.pass_s(small, "bwd_data", "") + compute.pass_s(small, "bwd_weights", "")
    want = (1e-4 + 2e-5 - fwd - 2e-6) + (1e-4 + 3e-5 - bwd - 3e-6)
    assert layer_host_excess_s(small, fw, compute) == pytest.approx(want)
    big = _local("vgg16", "conv2d", 256)
    assert layer_host_excess_s(big, fw, compute) == 0.0
    # CUDA graphs issue the step at once; an idle host issues nothing
    graphs = _host(op_s=1e-4, launch_s=1e-5, cuda_graphs=True)
    assert layer_host_excess_s(small, graphs, compute) == 0.0
    assert layer_host_excess_s(small, load_framework("ideal"), compute) == 0.0


def test_the_framework_kernels_carry_the_excess_as_the_layers_dispatch_and_the_default_is_the_cost_model():
    h100 = load_machine("dgx-h100")
    compute = Roofline(h100)
    small = _local("resnet18", "batchnorm2d", 1)
    assert framework_kernels(compute, load_framework("ideal"), h100) is compute
    megatron = load_framework("megatron")  # no device factors, a host: still priced per layer
    priced = framework_kernels(compute, megatron, h100)
    assert isinstance(priced, FrameworkKernels)
    excess = layer_host_excess_s(small, megatron, compute)
    assert excess > 0 and priced.dispatch_s(small, "", 1) == pytest.approx(excess)
    # on a CPU the measured kernels hold the host: nothing is added
    local = load_machine("local")
    assert framework_kernels(compute, megatron, local) is compute
