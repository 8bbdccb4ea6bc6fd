"""Nothing below physics: no layer pass of any zoo network, on any shipped datasheet machine, in any
precision its datasheet has a peak for, with any convolution or attention algorithm that applies, is priced
faster than its irreducible arithmetic at the device's peak for that precision or its bytes at the
memory bandwidth. The irreducible arithmetic of each algorithm is counted
here by hand from the algorithm, independently of the cost model's work formulas:
- direct and im2col: every multiply-add of the convolution;
- Winograd F(2x2, 3x3): the alpha^2 = 16 tile products per (Cout, Cin, tile), the transforms not
  counted (a real kernel does them with additions);
- FFT: four real multiply-adds per complex bin of a real FFT of the padded plane, per (N, Cin, Cout);
- FlashAttention (attention on a machine that runs it): the projections' multiply-adds and the
  scores on and below the causal diagonal times the head width, two GEMMs forward and four
  backward, against the bytes of its input, output and weights (no S x S matrix is ever written).
Also: the Winograd and FFT work formulas against multiplies counted by hand for two small shapes.
"""

from __future__ import annotations

import math

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.calls.algorithms import CONV_ALGORITHMS, algorithm_applies
from costmodel.calls.layer_calls import PASSES
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.machine.loading import load_machine, shipped_machine_names
from costmodel.parallel.shard import local_layer
from costmodel.choices.precision import MATMUL_OPS, PRECISIONS, with_precision
from costmodel.parallel.strategy import make_strategy
from networks.ir import DTYPE_BYTES
from networks.loader import load_network, zoo_names
from networks.ops.conv import fft_work, winograd_work
from profiler.context import compute_model

MACHINES = [m for m in shipped_machine_names() if m != "local"]  # local's figures come from this host


def _irreducible_macs(local, algorithm: str, pass_: str) -> float:
    """The multiply-adds no kernel of this algorithm can avoid, for one pass."""
    if algorithm not in ("winograd", "fft"):
        return local_cost(local).flops[PASSES.index(pass_)] / 2
    c, h, w = local.in_shapes[0]
    f, ho, wo = local.out_shape
    n = local.batch
    if algorithm == "winograd":
        eh, ew = (h, w) if pass_ == "bwd_data" else (ho, wo)  # bwd_data tiles the input's extent
        return 16 * f * c * n * math.ceil(eh / 2) * math.ceil(ew / 2)
    ph, pw = local.p["padding"]  # fft
    hp, wp = h + 2 * ph, w + 2 * pw
    return 4 * hp * (wp // 2 + 1) * n * c * f


def _cases(precision: str = "fp32", machine=None):
    for name in zoo_names():
        net = with_precision(load_network(name), precision)
        for layer in net.layers:
            algos = [a for a in CONV_ALGORITHMS if algorithm_applies(layer, a)] if layer.op == "conv2d" else [""]
            if layer.op == "attention" and machine is not None and machine.device.flash:
                algos = ["flash", "materialized"]
            yield name, layer, algos


def _flash_floor(local, pass_: str, itemsize: int) -> tuple[float, float]:
    """(MACs, bytes) no FlashAttention pass can avoid, counted by hand: the projections' multiply-adds
    and, per head, the scores on and below the causal diagonal (all of them without the mask) times
    the head width, twice forward (q k^T, p v) and four times backward (dv, dp, dq, dk; recomputing
    the scores is the algorithm's choice, not counted); the bytes of the input read and the output
    written once (or their gradients) and of the weights."""
    s, d = local.in_shapes[0]
    p = local.p
    heads, kv, dh = p["heads"], p.get("kv_heads") or p["heads"], p.get("head_dim") or d // p["heads"]
    rows = local.batch * s
    proj = rows * d * (2 * heads + 2 * kv) * dh
    scores = local.batch * heads * (s * (s + 1) // 2 if p["causal"] else s * s)
    core = {"fwd": 2, "bwd_data": 4, "bwd_weights": 0}[pass_] * scores * dh
    weights = sum(math.prod(shape) for _, shape in local.weight_shapes)
    return proj + core, (2 * rows * d + weights) * itemsize


def _peak(machine, precision: str, layer) -> float:
    """The fastest any kernel of ``layer`` can compute in ``precision``: tensor cores for GEMM-like
    ops (in fp32 the CUDA cores: no tensor cores without TF32), and for other ops in 16 bits the
    highest peak the device has at all."""
    peaks = machine.device.peak_flops
    prec = PRECISIONS[precision]
    if precision == "fp32":
        return peaks["float32"]
    if layer.op in MATMUL_OPS:
        return peaks[prec.matmul]
    return peaks["float32"] if prec.storage == "float32" else max(peaks.values())


CASES = [(m, prec) for m in MACHINES for prec in PRECISIONS
         if PRECISIONS[prec].matmul in load_machine(m).device.peak_flops]


@pytest.mark.parametrize("machine_name, precision", CASES)
def test_no_pass_is_priced_below_its_arithmetic_or_its_bytes(machine_name, precision):
    machine = load_machine(machine_name)
    model = compute_model(machine, precision=precision)
    bandwidth = machine.device.mem_bandwidth_bytes_per_s
    checked = 0
    for net_name, layer, algos in _cases(precision, machine):
        local = local_layer(layer, make_strategy(1, {}), 8)
        cost = local_cost(local)
        peak = _peak(machine, precision, layer)
        for algorithm in algos:
            for i, pass_ in enumerate(PASSES):
                priced = model.pass_s(local, pass_, algorithm)
                arithmetic = 2 * _irreducible_macs(local, algorithm, pass_) / peak
                moved = (cost.bytes_read[i] + cost.bytes_written[i]) / bandwidth
                if algorithm == "flash":
                    macs, nbytes = _flash_floor(local, pass_, DTYPE_BYTES[layer.dtype])
                    arithmetic, moved = 2 * macs / peak, nbytes / bandwidth
                assert priced >= max(arithmetic, moved) * (1 - 1e-9), (
                    f"{machine_name} {precision} {net_name} {layer.name} {pass_} {algorithm or '-'}: priced "
                    f"{priced:.3e} s, "
                    f"arithmetic {arithmetic:.3e} s, bytes {moved:.3e} s")
                checked += 1
    assert checked > 1000  # every zoo layer, pass and algorithm


def test_winograd_work_counts_algorithm_6_multiplied_out():
    # F(2x2, 3x3): alpha = 4. One sample, one channel, one filter, a 2x2 output: one tile.
    # filter transform 9*4 + 16*3 = 84; input transform 2 * 4^3 = 128; product 16; output 16*2 + 4*4 = 48
    assert winograd_work(1, 1, 1, 2, 2, 3) == 84 + 128 + 16 + 48
    # N=2, C=3, F=5, 4x6 output: P = 2*2*3 = 12 tiles
    p = 12
    assert winograd_work(2, 3, 5, 4, 6, 3) == 5 * 3 * 84 + p * 3 * 128 + 16 * 5 * 3 * p + 5 * p * 48


def test_fft_work_counts_transforms_and_complex_products():
    # a 6x6 padded plane: real FFT bins 6 * (6 // 2 + 1) = 24, four real MACs each
    n, c, f = 2, 3, 4
    transforms = 1.25 * 36 * math.log2(36) * (f * c + n * c + n * f)
    assert fft_work(n, c, f, 6, 6) == int(transforms) + 4 * 24 * n * c * f


def test_winograd_never_saves_more_than_its_multiplies_allow():
    net = load_network("resnet50")
    local = local_layer(net.layer("layer3.5.conv2"), make_strategy(1, {}), 32)
    model = Roofline(load_machine("dgx-a100"))
    direct, winograd = model.pass_s(local, "fwd", "direct"), model.pass_s(local, "fwd", "winograd")
    assert direct / 2.25 <= winograd < direct  # 16 products where direct has 36


@pytest.mark.parametrize("name", ["gpt2", "mlp"])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16"])
def test_no_planned_step_beats_its_flops_at_peak(name, precision):
    """A plan's model FLOP utilisation stays under the efficiency of the class its GEMMs run in: no
    pass of any layer (a tied LM head's weight gradient included) is left unpriced. (Networks of
    GEMMs only: a convolution on Winograd or FFT does fewer FLOPs than the model counts, so a CNN's
    utilisation of its nominal FLOPs may exceed it; the per-pass floor above covers those.)"""
    from costmodel.choices.precision import get_precision, matmul_peak
    from planner.problem.solve import Settings, make_plan
    machine = load_machine("dgx-a100")
    net = with_precision(load_network(name), precision)
    plan = make_plan(net, name, 64, 8, machine, compute_model(machine, precision=precision),
                     settings=Settings(choices=TrainingChoices(precision=precision)), with_baselines=False)
    kind = next(matmul_peak(layer, get_precision(precision).matmul == "tf32")[1] for layer in net.layers
                if layer.op in MATMUL_OPS)
    assert 0 < plan.mfu <= machine.device.efficiency_of(kind) * (1 + 1e-9)


@pytest.mark.parametrize("itemsize, slots, counted", [
    (4, 1, 4 + 4 + 4 + 4 + 4),            # fp32 SGD with momentum: weight r/w, gradient, momentum r/w
    (4, 2, 4 + 4 + 4 + 2 * (4 + 4)),      # fp32 Adam: and two moments r/w
    (2, 1, 2 + 2 + 4 + 4 + 4 + 4),        # mixed: 16-bit gradient in, 16-bit weight out, fp32 master, momentum
    (2, 2, 2 + 2 + 4 + 4 + 2 * (4 + 4)),  # mixed Adam: 28 bytes a weight
])
def test_the_optimiser_step_moves_every_byte_its_state_needs(itemsize, slots, counted):
    """Adam's update is priced with both of its moments read and written, never as SGD's."""
    roof = Roofline(load_machine("dgx-a100"))
    elems = 10 ** 8
    floor = counted * elems / roof.machine.device.mem_bandwidth_bytes_per_s
    assert roof.update_s(elems, itemsize, slots) >= floor
    assert roof.update_s(elems, itemsize, slots) == pytest.approx(
        floor / roof.machine.device.efficiency_of("memory"))
