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
    # each pass takes its issue where the host is slower: its kernels, their gaps and the excess
    want = (1e-4 + 2e-5 - fwd - 2e-6) + 2e-6 + (1e-4 + 3e-5 - bwd - 3e-6) + 3e-6
    assert layer_host_excess_s(small, fw, compute) == pytest.approx(want)
    big = _local("vgg16", "conv2d", 256)  # its kernels outlast their issue: the 5 launches' gaps alone
    assert layer_host_excess_s(big, fw, compute) == pytest.approx(5e-6)
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


def test_more_local_experts_make_a_mixture_of_experts_pass_host_bound():
    """``kernels.moe.per_local_expert``: each expert of the shard adds its launches to the pass.
    Hand-worked, with no op cost nor launch gap: 2 fixed launches and 2 an expert at a fifth of the
    forward's kernels each issue in 0.4 of them with no expert (no excess) and, with the shard's 4
    experts, in 2 (10 launches): the forward then waits one forward's time for its issue."""
    h100 = load_machine("dgx-h100")
    compute = Roofline(h100)
    moe = _local("tiny-moe", "moe", 8)
    assert moe.p["experts"] == 4
    fwd = compute.pass_s(moe, "fwd", "")
    kernels = {"moe": {"fwd": 2, "bwd": 0, "per_local_expert": {"fwd": 2, "bwd": 0, "basis": "published"}}}

    def framework(per_expert: bool):
        entry = dict(kernels["moe"]) if per_expert else {"fwd": 2, "bwd": 0}
        return framework_from_dict({"name": "x", "about": "y", "kernels": {"moe": entry},
                                    "host": {"launch_s": fwd / 5}})

    assert framework(True).op("moe").launches("fwd", 4) == 10
    assert layer_host_excess_s(moe, framework(False), compute) == 0.0
    assert layer_host_excess_s(moe, framework(True), compute) == pytest.approx(fwd)
    # a shard of one expert (expert parallelism over 4) issues 4 launches: no excess
    one = local_layer(next(x for x in load_network("tiny-moe").layers if x.op == "moe"), Strategy.of(4, E=4), 8)
    assert one.p["experts"] == 1
    assert layer_host_excess_s(one, framework(True), compute) == pytest.approx(
        max(0.0, 4 * fwd / 5 - compute.pass_s(one, "fwd", "")))
