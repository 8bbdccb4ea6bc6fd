"""Nothing below physics under a framework (costmodel.frameworks.kernels): a framework's device
factor below 1 (fitted: eager PyTorch's elementwise kernels run faster than the machine's class
efficiencies price them) never takes a layer pass that launches kernels of its own below its
arithmetic at the datasheet peak of its format or its bytes at the full memory bandwidth."""

from __future__ import annotations

import pytest

from costmodel.calls.algorithms import default_algorithms
from costmodel.compute.calibration import with_efficiencies
from costmodel.compute.roofline import Roofline
from costmodel.frameworks.kernels import FrameworkKernels
from costmodel.frameworks.loading import load_framework, shipped_framework_names
from costmodel.machine.loading import load_machine
from costmodel.machine.model import EFFICIENCY_CLASSES
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import make_strategy
from costmodel.choices.precision import with_precision
from networks.loader import load_network

H100 = load_machine("dgx-h100")
AT_PEAK = with_efficiencies(H100, {kind: 1.0 for kind in EFFICIENCY_CLASSES})


@pytest.mark.parametrize("framework", [f for f in shipped_framework_names() if f != "ideal"])
@pytest.mark.parametrize("name,precision", [("gpt2", "bf16"), ("resnet50", "fp32"), ("mixtral-8x7b", "bf16"),
                                            ("resnet50", "bf16")])
def test_no_pass_of_its_own_kernels_is_priced_below_physics(framework, name, precision):
    fw = load_framework(framework)
    net = with_precision(load_network(name), precision)
    algorithms = default_algorithms(net)
    model = FrameworkKernels(Roofline(H100), fw, H100)
    checked = 0
    for layer in net.layers:
        local = local_layer(layer, make_strategy(1, {}), 8)
        algorithm = algorithms.get(layer.name, "")
        ops = fw.op(layer.op, algorithm)
        tf32 = precision == "fp32" and ((fw.float32_convolutions == "tf32" and layer.op == "conv2d")
                                         or (fw.float32_matmuls == "tf32" and layer.op in ("linear", "attention", "moe")))
        for pass_ in ("fwd", "bwd_data", "bwd_weights"):
            if not ops.launches("fwd" if pass_ == "fwd" else "bwd"):
                continue  # fused into a neighbour's kernel: its bytes need not move on their own
            floor = Roofline(AT_PEAK, tf32=tf32).pass_s(local, pass_, algorithm)
            assert model.pass_s(local, pass_, algorithm) >= floor * (1 - 1e-12), (framework, layer.name, pass_)
            checked += 1
    assert checked > len(net.layers)


def test_eager_pytorch_elementwise_kernels_move_their_bytes_at_full_bandwidth_at_most():
    """GPT-2's GELU on one H100 in bf16 under eager PyTorch: its forward reads and writes its tensor
    once, no faster than 3.35 TB/s allows, however low the fitted factor."""
    net = with_precision(load_network("gpt2"), "bf16")
    gelu = next(layer for layer in net.layers if layer.op == "gelu")
    local = local_layer(gelu, make_strategy(1, {}), 16)
    got = FrameworkKernels(Roofline(H100), load_framework("pytorch"), H100).pass_s(local, "fwd", "")
    elems = 16 * 1024 * 3072
    assert got >= 2 * 2 * elems / H100.device.mem_bandwidth_bytes_per_s
