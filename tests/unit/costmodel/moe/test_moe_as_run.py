"""A mixture of experts priced as Megatron-Core runs it: the experts' kernels one after another
(costmodel.calls.moe.experts_kernels: grouped GEMMs, the activation, Transformer Engine's FP8
casts), what the layer keeps under FP8 GEMMs and the moe_act recomputation, and expert parallelism
folded over data x sequence-parallel tensor ranks (Strategy.expert_seq), each against hand counts;
and a published row's memory by what holds it (bench/published/published_modern.py)."""

from __future__ import annotations


import pytest

from costmodel.compute.roofline import Roofline, local_cost
from costmodel.comm.expert import expert_collectives
from costmodel.machine.loading import load_machine
from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import local_layer
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.calls.moe import FP8_CAST_BYTES, experts_kernels
from costmodel.choices.precision import with_precision
from costmodel.parallel.strategy import make_strategy
from networks.spec import parse_network

from tests.support.bench import load_bench

H100 = load_machine("dgx-h100")
S, D, E, K, HID = 256, 64, 8, 2, 32


def _net(moe: str = "", precision: str = "bf16", seq: int = S):
    """A norm and a mixture of experts as one repeated block (FP8 GEMMs run inside blocks)."""
    text = "\n".join(["name: t", "inputs:", f"  x: {{shape: [{seq}, {D}]}}", "blocks:", "  b:", "    layers:",
                      "      - {name: norm, op: rmsnorm}",
                      f"      - {{name: moe, op: moe, experts: {E}, top_k: {K}, hidden: {HID}{moe}}}",
                      "layers:", "  - {use: b, name: h, repeat: 1}",
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    return with_precision(parse_network(text, "<t>"), precision)


def _moe(net):
    return next(layer for layer in net.layers if layer.op == "moe")


def _experts(precision: str = "bf16", pass_: str = "fwd", moe: str = ""):
    layer = _moe(_net(moe, precision))
    local = local_layer(layer, make_strategy(1, {}), 1)
    return local, next(c for c in kernel_calls(local, pass_, "") if c.kernel.startswith("moe_experts."))


@pytest.mark.parametrize("pass_", ["fwd", "bwd_data", "bwd_weights"])
def test_the_experts_kernels_sum_to_the_call_and_their_gemms_are_counted_by_hand(pass_):
    """Every expert runs ``rows`` = capacity rows (S x top_k / experts): fc1 (D -> 2 hidden, SwiGLU)
    and fc2 (hidden -> D) at two FLOPs a multiply-add; the activation's FLOPs are the rest."""
    _, call = _experts(pass_=pass_)
    rows = S * K // E
    kernels = experts_kernels(call)
    assert sum(f for f, _, _ in kernels) == call.flops and sum(b for _, b, _ in kernels) == call.bytes
    gemms = [f for f, _, matrix in kernels if matrix]
    assert sorted(gemms) == sorted([2 * E * rows * D * 2 * HID, 2 * E * rows * HID * D])
    if pass_ == "fwd":  # the activation reads gate and up, writes the hidden: (2 + 1) rows x hidden x 2 bytes
        assert [b for _, b, matrix in kernels if not matrix] == [3 * E * rows * HID * 2]


def test_fp8_casts_each_gemm_operand_once_at_four_bytes_an_element():
    """Under FP8 each grouped GEMM's 16-bit operand is cast first (read 2 bytes, write the FP8 copy
    and its transpose): forward fc1's input (rows x D) and fc2's (rows x hidden); backward the
    gradients of fc2's output (rows x D) and of fc1's output (rows x 2 hidden)."""
    rows = S * K // E
    _, fwd = _experts("fp8", "fwd")
    _, bwd = _experts("fp8", "bwd_data")
    casts = [b for f, b, matrix in experts_kernels(fwd, fp8=True) if not matrix and f == 0]
    assert casts == [FP8_CAST_BYTES * E * rows * D, FP8_CAST_BYTES * E * rows * HID]
    casts = [b for f, b, matrix in experts_kernels(bwd, fp8=True) if not matrix and f == 0]
    assert casts == [FP8_CAST_BYTES * E * rows * D, FP8_CAST_BYTES * E * rows * 2 * HID]
    assert len(experts_kernels(fwd, fp8=False)) == 3


def test_no_expert_kernel_is_priced_below_its_bytes_or_its_gemms_at_peak():
    """The roofline of the experts' call is each kernel's max(FLOPs at peak, bytes at bandwidth),
    summed: at least the activation's bytes at full bandwidth plus the GEMMs at peak (FP8's)."""
    local, call = _experts("fp8")
    roof = Roofline(H100)
    got = roof._moe_call_s(local, call)
    kernels = experts_kernels(call, fp8=True)
    bw, peak = H100.device.mem_bandwidth_bytes_per_s, H100.device.peak_flops["float8"]
    floor = sum(b / bw for _, b, matrix in kernels if not matrix) + sum(f / peak for f, _, m in kernels if m)
    assert got >= floor
    assert got >= call.bytes / bw  # never faster than all its bytes once through memory


def test_kept_bytes_under_fp8_and_the_activation_recomputation_by_hand():
    """Kept besides the input (bf16, 2 bytes): routing probabilities (S x experts), the dispatched
    rows (R x D), fc1's output (R x 2 hidden), the activation's output (R x hidden), the experts'
    outputs (R x D), R = S x top_k. Under FP8 the two GEMM inputs are kept as FP8 (1 byte); with
    recompute_act the activation's output is not kept, and backward runs the activation again."""
    r = S * K
    bf16 = 2 * (S * E + r * D + r * 2 * HID + r * HID + r * D)
    for moe, precision, want in (("", "bf16", bf16), ("", "fp8", bf16 - r * D - r * HID),
                                 (", recompute_act: true", "bf16", bf16 - 2 * r * HID),
                                 (", recompute_act: true", "fp8", bf16 - r * D - 2 * r * HID)):
        local = local_layer(_moe(_net(moe, precision)), make_strategy(1, {}), 1)
        assert local_cost(local).activation_bytes == want, (moe, precision)
    local, _ = _experts(moe=", recompute_act: true")
    again = [c for c in kernel_calls(local, "bwd_data", "") if c.kernel == "gelu.fwd"]
    assert [(c.shape, c.flops) for c in again] == [((r * HID,), 5 * r * HID)]  # SwiGLU: silu 4 + product 1


def test_expert_parallelism_folds_over_the_sequence_parallel_tensor_ranks():
    """EP 8 on 4 data x 2 tensor ranks with sequence parallelism (Megatron-Core's MoE Parallel
    Folding, expert tensor parallelism 1): every rank holds experts / 8 whole experts and routes its
    own sequence shard (S / 2 tokens of one sample), as the sequence-parallel norm holds them (no
    reshard, no tensor-parallel collective), and its all-to-alls over the 8 ranks move its
    top_k x S / 2 rows of D."""
    net = _net()
    strategies, fallbacks = megatron_strategies(net, 8, 4, 2, sequence_parallel=True, expert=8)
    assert not fallbacks
    moe, norm = (next(s for n, s in strategies.items() if n.endswith(suffix)) for suffix in ("moe", "norm"))
    assert moe.as_dict() == {"E": 8, "ESEQ": 2} and moe.tokens == norm.plain == make_strategy(8, {"N": 4, "H": 2})
    local = local_layer(_moe(net), moe, 4)
    assert (local.batch, local.in_shapes[0], local.p["experts"], local.p["hidden"]) == (1, (S // 2, D), 1, HID)
    comms = expert_collectives(_moe(net), moe, local, 2)
    assert {c[2] for c in comms} == {"alltoall"} and len(comms) == 4
    assert all(c[3] == K * (S // 2) * D * 2 for c in comms)  # capacity rows of every expert = top_k x tokens
    with pytest.raises(Exception, match="or that times --tensor with --sequence-parallel"):
        megatron_strategies(net, 8, 4, 2, sequence_parallel=False, expert=8)


def _published():
    return load_bench("published_modern")


def test_qwen3_235b_memory_by_what_holds_it():
    """NeMo 25.11 Qwen3 235B-A22B (TP 2, PP 8, EP 32 over data x tensor, distributed optimizer) on
    its first stage's 11 layers (the recipe counts the embedding and the loss as layers in the cut:
    (94 + 2) / (8 x 4 chunks) = 3 a chunk, the first chunk the embedding and 2 blocks, then three
    chunks of 3): each MoE layer's weights are experts / 32 = 4 whole experts of
    3 x 1536 x 4096, kept in FP8 (the recipe's fp8_param_gather: one byte each), and the 128 x 4096
    router in bf16; the experts' float32 master weights and Adam
    state (12 bytes a parameter) unsharded, their expert-data-parallel degree being
    16 x 2 / 32 = 1; and the stage's peak within the 80 GB the run had."""
    pm = _published()
    row = next(r for r in pm.load_rows() if r["name"] == "nemo2511-qwen3-235b-a22b-256gpu-fp8-cs")
    stage = pm.predict_row(row).stages[0]
    moes = [x.layer for x in stage.micro.layers if x.layer.name.endswith(".moe")]
    assert len(moes) == 2 + 3 * 3
    experts, router = 4 * 3 * 1536 * 4096, 128 * 4096
    for m in moes:
        assert m.memory.weights == experts + 2 * router
        # the router replicated over the 32 ranks, its state sharded over all 32 (Megatron-Core shards it
        # over the 16 data ranks: 0.2 MB a layer more, left as the layout algebra has it)
        assert m.memory.master + m.memory.optimizer == 12 * experts + 12 * router // 32
        assert m.strategy.as_dict() == {"E": 32, "ESEQ": 2}
    assert stage.memory_peak_bytes < 80 * 2 ** 30
