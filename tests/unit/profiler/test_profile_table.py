"""Profile tables: kernel_calls vs the catalogue, format round-trip, merge, resume, errors, interpolation."""

from __future__ import annotations

import json
import math

import pytest

from costmodel.calls.layer_calls import kernel_calls, PASSES
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.machine.loading import load_machine
from costmodel.calls.kernel_call import KernelCall, linear_call
from costmodel.parallel.shard import local_layer
from costmodel.compute.profile_links import links_from_table
from costmodel.compute.profile_table import Entry, ProfileTable, merge, table_from_dict, table_to_dict
from costmodel.compute.profiled import ProfiledCompute, interpolate
from costmodel.frameworks.uniform import uniform_strategies
from networks.errors import DnnplanError
from networks.loader import load_network
from profiler.tables.store import open_for_device, read_table, write_table

FP = {"backend": "numpy", "device": "test cpu", "cores": 2, "threads": 1, "memory_bytes": 1}
# ops whose calls follow the catalogue pass by pass (embedding has no kernel; layernorm's one
# backward kernel computes dgamma too)
EXACT_OPS = {"attention", "conv2d", "linear", "relu", "gelu", "dropout", "add", "concat", "maxpool2d", "avgpool2d",
             "global_avgpool", "batchnorm2d", "softmax_cross_entropy", "flatten"}


@pytest.mark.parametrize("name", ["lenet5", "alexnet", "resnet18", "googlenet", "gpt2", "mlp"])
@pytest.mark.parametrize("spec", ["data", "filter", "channel", "spatial"])
def test_kernel_call_flops_equal_catalogue(name, spec):
    net = load_network(name)
    for p in (1, 2, 4):
        strategies, _ = uniform_strategies(net, p, 8 * p, spec)
        for layer in net.layers:
            local = local_layer(layer, strategies[layer.name], 8 * p)
            cost = local_cost(local)
            calls = [kernel_calls(local, ps, "im2col") for ps in PASSES]
            if layer.op in EXACT_OPS:
                assert [sum(c.flops for c in cs) for cs in calls] == list(cost.flops), (layer.name, spec, p)
            elif layer.op == "layernorm":
                assert sum(c.flops for cs in calls for c in cs) == sum(cost.flops)


def test_conv_padding_of_a_spatial_shard_reproduces_the_local_output():
    from kernels.conv import conv_output_hw
    net = load_network("resnet18")
    strategies, _ = uniform_strategies(net, 4, 8, "spatial")
    for layer in net.layers:
        if layer.op != "conv2d":
            continue
        local = local_layer(layer, strategies[layer.name], 8)
        (call,) = kernel_calls(local, "fwd", "im2col")
        n, c, h, w, f, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, g, b = call.shape
        assert conv_output_hw(h, w, kh, kw, (sh, sw), (pt, pb, pl, pr), (dh, dw)) == local.out_shape[1:]


def _table(entries=None, comm=None, fp=FP):
    return ProfileTable(dict(fp), entries or {}, comm or {}, "<test>")


def _entry(t, flops):
    return Entry(t, t, 0.01, 5, flops, flops)


def test_round_trip_and_atomic_write(tmp_path):
    call = linear_call("linear.fwd", 64, 64, 64, True, "float32", 4)
    t = _table({call.key: _entry(1e-3, call.flops)}, {"ranks": 2})
    path = tmp_path / "t.json"
    write_table(t, path)
    back = read_table(path)
    assert table_to_dict(back) == table_to_dict(t)
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary left behind


def test_merge_and_foreign_refusal():
    a = _table({"k|1|float32|": _entry(1.0, 1)})
    b = _table({"k|1|float32|": _entry(2.0, 1), "k|2|float32|": _entry(3.0, 2)})
    m = merge(a, b)
    assert m.entries["k|1|float32|"].median_s == 2.0 and len(m.entries) == 2
    other = _table(fp={**FP, "device": "other"})
    with pytest.raises(DnnplanError, match="different devices"):
        merge(a, other)


def test_resume_skips_measured(tmp_path):
    from profiler.run import profile_calls
    from profiler.timing.harness import QUICK
    calls = [KernelCall("relu.fwd", (n,), "float32", "", n, 8 * n) for n in (100, 200)]
    path = str(tmp_path / "t.json")
    fp = {**FP}
    first = profile_calls(calls[:1], open_for_device(path, fp), policy=QUICK, out=path)
    assert len(first.measured) == 1
    second = profile_calls(calls, open_for_device(path, fp), policy=QUICK, out=path)
    assert second.skipped == 1 and list(second.measured) == [calls[1].key]
    assert len(read_table(path).entries) == 2


def test_open_for_device_refuses_a_foreign_table(tmp_path):
    path = tmp_path / "t.json"
    write_table(_table(), path)
    with pytest.raises(DnnplanError, match="another device"):
        open_for_device(str(path), {**FP, "threads": 2})


@pytest.mark.parametrize("text,match", [("{not json", "is not a profile table: invalid JSON"),
                                        ("network: lenet5\ndevices: 2\nlayers:\n  - {name: conv1}\n",
                                         r"is a dnnplan plan, not a profile table \(give a profile table, or a new file"),
                                        ("[]", "not a dnnplan profile"),
                                        ('{"format": "dnnplan-profile", "version": 99}', "version"),
                                        ('{"format": "dnnplan-profile", "version": 1, "fingerprint": {}}', "corrupt")])
def test_corrupt_tables_are_clear_errors(tmp_path, text, match):
    """A file that is no table (a plan given as --out, a table cut short) is said to be none, with a
    fix that never tells the user to delete their file."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DnnplanError, match=match) as err:
        read_table(path)
    assert "delete" not in str(err.value)


def test_bad_entry_is_corrupt():
    data = table_to_dict(_table())
    data["entries"] = {"relu.fwd|10|float32|": {"median_s": -1}}
    with pytest.raises(DnnplanError, match="corrupt"):
        table_from_dict(data, "x")


def test_missing_table_is_clear_error(tmp_path):
    with pytest.raises(DnnplanError, match="no such profile table file"):
        read_table(tmp_path / "nope.json")


def _gemm_table():
    entries = {}
    for m, t in ((64, 1e-4), (256, 2e-3), (1024, 5e-2)):
        c = linear_call("linear.fwd", m, m, m, False, "float32", 4)
        entries[c.key] = _entry(t, c.flops)
    return _table(entries)


def test_interpolation_exact_at_measured_points_and_monotone_between():
    pc = ProfiledCompute(_gemm_table(), Roofline(load_machine("dgx-a100")))
    for m, t in ((64, 1e-4), (256, 2e-3), (1024, 5e-2)):
        assert pc.lookup(linear_call("linear.fwd", m, m, m, False, "float32", 4)).seconds == t
    prev = 1e-4
    for m in range(72, 1024, 40):
        got = pc.lookup(linear_call("linear.fwd", m, m, m, False, "float32", 4))
        assert got.how == "interpolated"
        assert prev <= got.seconds <= 5e-2
        prev = got.seconds
    out = pc.lookup(linear_call("linear.fwd", 2048, 2048, 2048, False, "float32", 4))
    assert out.how == "extrapolated" and out.seconds > 5e-2


def test_interpolate_between_two_points_is_linear_in_log_space():
    pts = [(0.0, (0.0,), 1.0), (2.0, (1.0,), 3.0)]
    assert interpolate(pts, 1.0, (0.5,)) == (2.0, True)
    assert interpolate(pts, 3.0, (2.0,)) == (3.0, False)


def test_unprofiled_kernels_fall_back_and_are_counted():
    net = load_network("lenet5")
    pc = ProfiledCompute(_gemm_table(), Roofline(load_machine("dgx-a100")))
    strategies, _ = uniform_strategies(net, 1, 8, "data")
    conv = next(l for l in net.layers if l.op == "conv2d")
    local = local_layer(conv, strategies[conv.name], 8)
    # the fallback prices the kernel call's own flops and bytes, the roofline the layer pass's: equal
    # but for the bytes the two count differently, which the memory efficiency weighs (0.01%)
    assert pc.pass_s(local, "fwd", "im2col") == pytest.approx(Roofline(load_machine("dgx-a100")).pass_s(local, "fwd", "im2col"), rel=1e-3)
    assert len(pc.misses) == 1
    assert pc.name.startswith("profile test cpu")


def test_links_from_table_replaces_intra_link_immutably():
    machine = load_machine("local")
    table = _table(comm={"ranks": 2, "link": {"alpha_s": 2e-6, "beta_s_per_byte": 1e-10, "gamma_s_per_byte": 2e-10}})
    m2 = links_from_table(machine, table)
    assert m2.intra.alpha_s == 2e-6 and m2.inter.alpha_s == 2e-6
    assert machine.intra.alpha_s != 2e-6
    assert links_from_table(machine, _table()) is machine


def test_each_collective_is_costed_with_its_own_fit():
    """profile-comm fits alpha/beta/gamma per collective; the local machine uses each fit."""
    from costmodel.comm.groups import collective_s
    from costmodel.machine.loading import load_machine
    from costmodel.layer.edge import _link
    from costmodel.compute.profile_links import links_from_table
    from costmodel.parallel.strategy import Strategy

    fits = {"allreduce": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0.0},
            "alltoall": {"alpha_s": 3e-5, "beta_s_per_byte": 2e-9, "gamma_s_per_byte": 0.0}}
    table = _table(comm={"ranks": 2, "collectives": fits,
                         "link": {"alpha_s": 2e-6, "beta_s_per_byte": 5e-10, "gamma_s_per_byte": 0.0}})
    base = load_machine("local")
    m = links_from_table(base, table)
    # allreduce of 1 MB over 2 ranks uses the allreduce fit; allgather (not fitted) the joint link
    ar = collective_s("allreduce", 1e6, 2, 1, m)
    joint = collective_s("allreduce", 1e6, 2, 1, (m.intra, m.inter))
    assert ar != joint and m.link_for_collective("allgather") is m.intra
    assert ar == collective_s("allreduce", 1e6, 2, 1, (m.link_for_collective("allreduce"), m.inter))
    assert m.link_for_collective("allreduce").alpha_s == 1e-5
    # reshards (Alltoallv) inside a node use the alltoall fit (of the message's size regime)
    assert _link(Strategy.of(2, N=2), ("N",), m) is None
    assert m.link_for_collective("alltoall", 1e6).alpha_s == 3e-5


def test_local_regression_follows_a_saturating_throughput_between_grid_points():
    """On a kernel whose throughput rises and saturates with work (time = latency + work / rate),
    measured on a power-of-two grid, the held-out 1.5x points are predicted within 3%; the
    two-corner straight line it replaced was off by more (so the test can tell them apart)."""
    def secs(m, k, n):
        return 2e-5 + 2 * m * k * n / 5e10

    entries = {}
    grid = (64, 128, 256, 512, 1024)
    for m in grid:
        for k in grid:
            for n in grid:
                c = linear_call("linear.fwd", m, k, n, False, "float32", 4)
                entries[c.key] = _entry(secs(m, k, n), c.flops)
    pc = ProfiledCompute(_table(entries), Roofline(load_machine("local")))
    errs, corner_errs = [], []
    for m in (96, 192, 384, 768):
        for k in (96, 384):
            for n in (192, 768):
                c = linear_call("linear.fwd", m, k, n, False, "float32", 4)
                got = pc.lookup(c)
                assert got.how == "interpolated"
                errs.append(abs(got.seconds - secs(m, k, n)) / secs(m, k, n))
                pts = pc._groups[next(iter(pc._groups))].points
                from costmodel.compute.profiled import _sizes, _two_point
                lw = math.log(c.work)
                two = _two_point(lw, _sizes(c.kernel, c.shape), [p for p in pts if p[0] <= lw],
                                 [p for p in pts if p[0] >= lw])
                corner_errs.append(abs(c.work / math.exp(two) - secs(m, k, n)) / secs(m, k, n))
    assert max(errs) < 0.03
    assert sorted(corner_errs)[len(corner_errs) // 2] > 2 * sorted(errs)[len(errs) // 2]


def test_comm_regimes_round_trip_and_pick_the_link_by_size(tmp_path):
    comm = {"ranks": 2, "link": {"alpha_s": 5e-6, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0.0},
            "collectives": {"alltoall": {"alpha_s": 5e-6, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0.0,
                                         "regimes": [[1024.0, 2e-6, 5e-10, 0.0], [None, 9e-6, 2e-10, 0.0]]}}}
    path = tmp_path / "t.json"
    write_table(_table(comm=comm), path)
    machine = links_from_table(load_machine("local"), read_table(path))
    assert machine.link_for_collective("alltoall", 1000).alpha_s == 2e-6
    assert machine.link_for_collective("alltoall", 1024).alpha_s == 2e-6
    assert machine.link_for_collective("alltoall", 1025).alpha_s == 9e-6
    assert machine.link_for_collective("alltoall").alpha_s == 9e-6
    assert machine.link_for_collective("allreduce", 10) is machine.intra


@pytest.mark.parametrize("regimes", [[[1024.0, 2e-6, -1.0, 0.0]], [[1024.0, 2e-6]], "x"])
def test_corrupt_comm_regimes_are_a_clear_error(tmp_path, regimes):
    comm = {"collectives": {"alltoall": {"alpha_s": 1e-6, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 0.0,
                                         "regimes": regimes}}}
    path = tmp_path / "t.json"
    data = {"format": "dnnplan-profile", "version": 1, "fingerprint": dict(FP), "entries": {}, "comm": comm}
    path.write_text(json.dumps(data))
    with pytest.raises(DnnplanError, match="corrupt: comm fit 'alltoall'"):
        read_table(path)


def _two_state_machine(tmp_path):
    """A local machine whose cold fits are 10x its warm ones, read back from a written table."""
    def fit(alpha, beta):
        return {"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": 0.0}
    warm = {"allreduce": fit(5e-6, 2e-10), "alltoall": fit(5e-6, 1e-10)}
    cold = {c: fit(f["alpha_s"] * 10, f["beta_s_per_byte"] * 10) for c, f in warm.items()}
    comm = {"ranks": 2, "bench": 2, "link": fit(5e-6, 2e-10), "collectives": warm, "cold": {"collectives": cold}}
    path = tmp_path / "t.json"
    write_table(_table(comm=comm), path)
    return links_from_table(load_machine("local"), read_table(path))


def test_collectives_after_kernels_are_costed_cold_and_gradient_allreduces_warm(tmp_path):
    """Reshards, input-gradient and partial-sum allreduces follow a layer's kernels (the cold
    fits); the weight-gradient allreduces run back to back after the backward pass (the warm
    ones). A table without cold fits costs everything warm, as before."""
    from costmodel.layer.edge import edge_estimate
    from costmodel.layer.cost import layer_estimate
    from costmodel.parallel.strategy import Strategy
    from networks.loader import load_network
    m = _two_state_machine(tmp_path)
    assert m.link_for_collective("allreduce", 1e6, cold=True).alpha_s == pytest.approx(5e-5)
    assert m.link_for_collective("allreduce", 1e6).alpha_s == pytest.approx(5e-6)
    assert m.link_for_collective("allgather", 1e6, cold=True) is m.intra  # not measured: the joint link
    net = load_network("lenet5")
    conv = next(l for l in net.layers if l.op == "conv2d")
    pc = ProfiledCompute(_table(), Roofline(m))
    f = layer_estimate(conv, Strategy.of(2, F=2), 8, m, pc)
    (ig,) = [c for c in f.comms if c.purpose == "input_grad"]
    assert ig.seconds == pytest.approx(collective_s_cold(ig.nbytes, m))
    d = layer_estimate(conv, Strategy.of(2, N=2), 8, m, pc)
    (gs,) = [c for c in d.comms if c.purpose == "grad_sync"]
    assert gs.seconds == pytest.approx(5e-6 + gs.nbytes * 2e-10, rel=0.5)  # warm, not 10x
    warm_only = links_from_table(load_machine("local"), _table(comm={**read_table(tmp_path / "t.json").comm,
                                                                     "cold": {}}))
    f_warm = layer_estimate(conv, Strategy.of(2, F=2), 8, warm_only, pc)
    assert f.bwd_comm_s > 5 * f_warm.bwd_comm_s
    # a reshard between layers (data -> filter split) is an Alltoallv after the producer's kernels
    nxt = net.layers[net.layers.index(conv) + 1]
    e_cold = edge_estimate(conv, Strategy.of(2, N=2), nxt, Strategy.of(2, C=2), 0, 8, m)
    e_warm = edge_estimate(conv, Strategy.of(2, N=2), nxt, Strategy.of(2, C=2), 0, 8, warm_only)
    assert e_cold.fwd_s > 5 * e_warm.fwd_s > 0


def collective_s_cold(nbytes, m):
    from costmodel.comm.groups import collective_s
    return collective_s("allreduce", nbytes, 2, 1, (m.link_for_collective("allreduce", nbytes, cold=True), m.inter))


def test_batched_reshard_times_use_the_cold_alltoall_fit(tmp_path):
    """The planner's vectorised reshard costs agree with edge_estimate's under cold fits."""
    from costmodel.layer.edge import edge_estimate
    from costmodel.parallel.shard import input_layout, output_layout
    from costmodel.layer.edge_table import reshard_times
    from costmodel.parallel.strategy import Strategy
    from networks.loader import load_network
    m = _two_state_machine(tmp_path)
    net = load_network("lenet5")
    a, b = net.layers[0], net.layers[1]
    for sa, sb in ((Strategy.of(2, N=2), Strategy.of(2, C=2)), (Strategy.of(2, F=2), Strategy.of(2, N=2))):
        e = edge_estimate(a, sa, b, sb, 0, 8, m)
        (t,) = reshard_times([(output_layout(a, sa, 8), input_layout(b, sb, 8, 0))], False, 4, m)
        assert t == pytest.approx(e.fwd_s)


def test_a_call_beyond_the_largest_measured_shape_takes_no_longer_than_the_roofline():
    """In a GPU's table a small kernel's throughput is a floor for a larger one, not its price:
    extrapolated upward past the datasheet's time, the roofline answers (a table timed on one 262 MFLOP linear layer
    priced GPT-2's 100 GFLOP ones 60 times the datasheet's); below the smallest, the nearest
    throughput is kept."""
    roof = Roofline(load_machine("dgx-a100"))
    slow = {linear_call("linear.fwd", 64, 64, 64, False, "float32", 4).key: _entry(1e-3, 2 * 64 ** 3)}
    pc = ProfiledCompute(_table(slow, fp={**FP, "backend": "cupy"}), roof)
    big = linear_call("linear.fwd", 8192, 8192, 8192, False, "float32", 4)
    got = pc.lookup(big)
    assert got.how == "extrapolated" and got.seconds == pytest.approx(roof.call_s(big))
    small = linear_call("linear.fwd", 16, 16, 16, False, "float32", 4)
    assert pc.lookup(small).seconds == pytest.approx(1e-3 * 16 ** 3 / 64 ** 3)  # the measured throughput
    cpu = ProfiledCompute(_table(slow), roof)  # a CPU's table: its throughput stands (rough datasheet figures)
    assert cpu.lookup(big).seconds == pytest.approx(1e-3 * 8192 ** 3 / 64 ** 3)


def test_a_gemm_call_alone_runs_on_its_element_types_matrix_peak():
    """A profile table's miss is priced as the call alone: a GEMM on the tensor cores in 16 bits or
    under TF32, the rest (and float32 GEMMs without TF32) on the CUDA cores."""
    machine = load_machine("dgx-h100")
    peaks, dev = machine.device.peak_flops, machine.device
    for dtype, tf32, key, kind in (("bfloat16", False, "bfloat16", "tensor_16bit"), ("float32", True, "tf32", "tensor_tf32"),
                                   ("float32", False, "float32", "cuda_cores")):
        call = linear_call("linear.fwd", 8192, 8192, 8192, False, dtype, 2 if dtype != "float32" else 4)
        assert Roofline(machine, tf32=tf32).call_s(call) == pytest.approx(
            call.flops / (peaks[key] * dev.efficiency_of(kind)))
    add = KernelCall("add.fwd", (1 << 20,), "bfloat16", "", 1 << 20, 6 << 20)
    assert Roofline(machine).call_s(add) == Roofline(machine, tf32=True).call_s(add)


def test_an_entry_key_not_of_four_fields_says_what_a_key_is():
    data = table_to_dict(_table())
    data["entries"] = {"bogus|key": {"median_s": 1e-3}}
    with pytest.raises(DnnplanError, match=r"entry 'bogus\|key': a key is KERNEL\|SHAPE\|DTYPE\|ALGORITHM"):
        table_from_dict(data, "x")


def test_a_kernel_whose_timing_cannot_end_within_max_seconds_is_not_started(tmp_path):
    """A running kernel cannot be stopped: under --max-seconds, a call whose arithmetic at the
    device's peak, for the policy's fewest runs, takes longer than what is left is not started, and
    the run says so (``too_long``) rather than run past the limit."""
    from profiler.run import least_timing_s, profile_calls
    from profiler.timing.harness import QUICK
    small = KernelCall("relu.fwd", (100,), "float32", "", 100, 800)
    huge = KernelCall("relu.fwd", (200,), "float32", "", 10 ** 15, 1600)  # 1e15 FLOPs: 1e4 s at 1e11 FLOP/s
    path = str(tmp_path / "t.json")
    run = profile_calls([small, huge], open_for_device(path, {**FP}), policy=QUICK, out=path, max_seconds=60,
                        peak_flops=1e11)
    assert list(run.measured) == [small.key] and run.left == [huge]
    assert run.too_long == (huge, least_timing_s(huge, QUICK, 1e11))
    assert run.too_long[1] == pytest.approx(1e4 * (QUICK.warmup + QUICK.min_reps))
    free = profile_calls([huge], open_for_device(str(tmp_path / "u.json"), {**FP}), policy=QUICK, max_seconds=60)
    assert free.too_long is None  # no peak known: nothing estimated (the huge relu is cheap to time here)


@pytest.mark.parametrize("precision", ["fp12", 16])
def test_a_fingerprint_precision_not_one_dnnplan_prices_names_the_table(precision):
    """It once reached the planner as `unknown --precision 'fp12'`, naming no table."""
    data = table_to_dict(_table())
    data["fingerprint"]["precision"] = precision
    with pytest.raises(DnnplanError, match=r"corrupt.*fingerprint precision must be one of fp32, .*got"):
        table_from_dict(data, "x.json")
