"""FlashAttention-2 as an attention algorithm (costmodel/calls/flash.py), chosen per layer like a
convolution algorithm: its tiles, work, memory traffic and kept bytes counted by hand from Dao's
Algorithms 1 and 2, the machine's default, the planner's candidates and the plan file."""

from __future__ import annotations

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import algorithms
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.calls.flash import flash_counts, tile_sizes, visited
from costmodel.calls.layer_calls import kernel_calls
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import local_layer
from costmodel.choices.precision import with_precision
from costmodel.parallel.strategy import make_strategy
from networks.errors import DnnplanError
from networks.loader import load_network
from networks.spec import parse_network
from profiler.context import compute_model

A100, H100, V100 = (load_machine(m) for m in ("dgx-a100", "dgx-h100", "dgx1-v100"))


def _attn(seq: int = 64, width: int = 48, heads: int = 3, causal: bool = True, dtype: str = "bf16"):
    text = "\n".join(["name: t", "inputs:", f"  x: {{shape: [{seq}, {width}]}}", "layers:",
                      f"  - {{name: attn, op: attention, heads: {heads}, causal: {str(causal).lower()}}}",
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    return with_precision(parse_network(text, "<t>"), dtype).layer("attn")


def test_tiles_fill_the_shared_memory_of_an_sm():
    # Q, K and V tiles of Br = Bc rows together: 3 Br d elements in the SM's shared memory
    assert A100.device.sram_bytes == 164 * 1024 and H100.device.sram_bytes == 228 * 1024
    assert tile_sizes(A100.device.sram_bytes, 128, 2) == (128, 128)  # 96 KiB of 164
    assert tile_sizes(A100.device.sram_bytes, 256, 2) == (64, 64)  # 128 rows would need 192 KiB
    assert tile_sizes(H100.device.sram_bytes, 256, 2) == (128, 128)  # 192 of 228 KiB
    assert tile_sizes(4000, 16, 4) == (16, 16)


def test_a_call_no_datasheet_prices_counts_its_work_at_flash_attention_2s_largest_tile():
    # a profile's key (timed on the device itself): no sram given, 128-row tiles, as on an H100
    local = local_layer(_attn(seq=512, width=256, heads=2), make_strategy(1, {}), 4)
    (core,) = [c for c in kernel_calls(local, "fwd", "flash") if c.kernel == "attention.fwd"]
    (priced,) = [c for c in kernel_calls(local, "fwd", "flash", H100.device.sram_bytes)
                 if c.kernel == "attention.fwd"]
    assert tile_sizes(None, 128, 2) == (128, 128)
    assert core.key == priced.key and (core.flops, core.bytes) == (priced.flops, priced.bytes)
    with pytest.raises(DnnplanError, match="on-chip memory"):  # a machine file that gives none
        kernel_calls(local, "fwd", "flash", 0)


def test_causal_tiles_visited_by_hand():
    # (key rows read, query rows read, scores) for 64 queries and keys in tiles of 16: query tile i
    # visits key tiles 0..i
    assert visited(64, 64, True, 16, 16) == (16 * 10, 16 * 10, 10 * 256)
    assert visited(64, 64, False, 16, 16) == (4 * 64, 16 * 16, 64 * 64)
    # tiles of 16 queries against 32 keys: the diagonal crosses every other key tile
    assert visited(64, 64, True, 16, 32) == (32 * 6, 16 * 6, 16 * 32 * 6)
    # fewer keys than a tile: the tile is clipped to them
    assert visited(8, 8, False, 128, 128) == (8, 8, 64)


def test_work_and_traffic_of_both_passes_by_hand():
    n, h, s, dh, item, sram = 2, 3, 64, 16, 4, 4000  # tiles of 16
    rows, area = 160, 2560  # key (forward) and query (backward) rows over the 10 visited tile pairs
    fwd = flash_counts(n, h, s, s, dh, True, item, sram, backward=False)
    bwd = flash_counts(n, h, s, s, dh, True, item, sram, backward=True)
    # forward: S = Q K^T and O += P V (4 dh a score), online softmax 5; Q read, O written, K and V
    # read per visited pair, L (float32) written
    assert fwd.flops == n * h * (4 * dh + 5) * area
    assert fwd.bytes == n * h * (item * dh * (2 * s + 2 * rows) + 4 * s)
    # backward: five GEMMs (S again, dV, dP, dQ, dK: 10 dh a score) and 5 for P and dS; K, V read and
    # dK, dV written once; per pair Q, dO (item), L, D (float32) read, dQ read and written in float32;
    # D = rowsum(dO o O) before, dQ cast after
    assert bwd.flops == n * h * (10 * dh + 5) * area
    per_row = 2 * item * dh + 2 * 4 + 2 * 4 * dh
    assert bwd.bytes == n * h * (4 * item * s * dh + rows * per_row + 2 * item * s * dh + 4 * s + (4 + item) * s * dh)
    # the backward's matrix work is 2.5 times the forward's (Dao 2023, section 3.1.2)
    assert (bwd.flops / (n * h * area) - 5) / (fwd.flops / (n * h * area) - 5) == 2.5


def test_flash_is_the_default_on_gpus_that_run_it_and_keeps_no_scores():
    layer = _attn(1024, 768, 12)
    strat = make_strategy(1, {})
    roof = Roofline(A100)
    flash, mat = (layer_estimate(layer, strat, 4, A100, roof, a) for a in ("", "materialized"))
    assert flash.algorithm == "flash" and mat.algorithm == "materialized"
    assert flash.fwd_compute_s < mat.fwd_compute_s and flash.bwd_data_s < mat.bwd_data_s
    scores = 4 * 12 * 1024 * 1024 * 2  # the probabilities, 16-bit
    stats = 4 * 12 * 1024 * 4  # L, float32
    assert mat.memory.activations - flash.memory.activations == scores - stats
    # a V100 runs no FlashAttention-2: materialised by default, flash refused in one line
    assert layer_estimate(layer, strat, 4, V100, Roofline(V100)).algorithm == "materialized"
    with pytest.raises(DnnplanError, match="flash attention does not run on V100"):
        layer_estimate(layer, strat, 4, V100, Roofline(V100), "flash")


def test_the_fused_kernel_is_priced_on_one_roofline_never_below_its_arithmetic_or_bytes():
    layer = _attn(4096, 4096, 32)
    local = local_layer(layer, make_strategy(1, {}), 2)
    roof = Roofline(H100)
    core = [c for c in kernel_calls(local, "fwd", "flash", H100.device.sram_bytes) if c.kernel == "attention.fwd"]
    assert [c.algo for c in core] == ["flash"]
    peak, bw = H100.device.peak_flops["bfloat16"], H100.device.mem_bandwidth_bytes_per_s
    for pass_ in ("fwd", "bwd_data"):
        calls = kernel_calls(local, pass_, "flash", H100.device.sram_bytes)
        floor = sum(max(c.flops / peak, c.bytes / bw) for c in calls)
        assert roof.pass_s(local, pass_, "flash") >= floor


def test_the_planner_weighs_flash_and_materialized_where_flash_runs():
    layer = _attn()
    assert algorithms(layer, machine=A100) == ("flash", "materialized")
    assert algorithms(layer, recompute=True, machine=A100) == ("flash", "materialized", "flash+recompute")
    assert algorithms(layer, machine=V100) == ("",)
    assert algorithms(layer, recompute=True) == ("", "recompute")  # the CPU executor's kernels


def test_the_planner_takes_flash_on_a_gpu_machine():
    from planner.problem.solve import Settings, make_plan
    net = with_precision(load_network("gpt2"), "bf16")
    plan = make_plan(net, "gpt2", 16, 8, A100, compute_model(A100, precision="bf16"),
                     settings=Settings(choices=TrainingChoices(precision="bf16")), with_baselines=False)
    assert {lp.algorithm for lp in plan.layers if lp.name.endswith(".attn")} == {"flash"}


def test_a_plan_file_names_an_attention_algorithm_or_is_refused(tmp_path):
    from planner.problem.solve import Settings, make_plan
    from planner.plan.plan_file import read_plan, write_plan
    net = load_network("gpt-tiny")
    plan = make_plan(net, "gpt-tiny", 4, 2, A100, Roofline(A100), settings=Settings(), with_baselines=False,
                     machine_ref="dgx-a100")
    path = tmp_path / "plan.yaml"
    write_plan(plan, str(path))
    text = path.read_text()
    assert "algorithm: flash" in text
    read_plan(str(path))
    path.write_text(text.replace("algorithm: flash", "algorithm: winograd", 1))
    with pytest.raises(DnnplanError, match="attention algorithm 'winograd'"):
        read_plan(str(path))
