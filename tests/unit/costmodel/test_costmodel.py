"""The cost model's must-hold properties (issue 3)."""

import re

import pytest

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.layer.cost import layer_estimate
from costmodel.step.prediction import predict_step
from costmodel.parallel.strategy import Strategy
from costmodel.frameworks.uniform import uniform_strategies
from networks.ops.base import prod
from networks.loader import load_network

from tests.support.paths import ASSETS

MACHINE = load_machine("dgx-a100")
ROOF = Roofline(MACHINE)


def predict(net, p, batch, spec):
    strategies, _ = uniform_strategies(net, p, batch, spec)
    return predict_step(net, batch, strategies, {}, MACHINE, ROOF)


@pytest.mark.parametrize("name", ["lenet5", "resnet18", "googlenet", "gpt2"])
def test_one_device_has_no_communication(name):
    net = load_network(name)
    pred = predict(net, 1, 2, "data")
    for row in pred.layers:
        assert row.reshard_s == 0.0
        assert row.layer.comms == ()
    assert pred.sync_s == 0.0 and pred.step_s > 0


@pytest.mark.parametrize("name,p", [("resnet50", 8), ("vgg16", 4), ("gpt2", 2), ("googlenet", 16)])
def test_data_parallel_allreduces_exactly_the_parameter_bytes(name, p):
    net = load_network(name)
    pred = predict(net, p, 2 * p, "data")
    synced = sum(c.nbytes for row in pred.layers for c in row.layer.comms if c.purpose == "grad_sync")
    assert synced == net.num_params * 4
    assert all(c.group == p for row in pred.layers for c in row.layer.comms if c.purpose == "grad_sync")
    # data parallel never reshards: every layer splits the batch the same way
    assert sum(row.reshard_s for row in pred.layers) == 0.0


@pytest.mark.parametrize("p", [2, 4, 8])
def test_filter_parallel_linear_holds_one_pth_of_the_weights(p):
    net = load_network("mlp")
    for layer in (l for l in net.layers if l.op == "linear"):
        est = layer_estimate(layer, Strategy.of(p, F=p), 64, MACHINE, ROOF)
        full = layer.num_params * 4
        features, inputs = layer.weight_shapes["weight"]
        if features % p == 0:
            assert est.memory.weights * p == full, layer.name
        else:  # uneven split: the largest shard holds ceil(F/p) rows of weight and bias
            assert est.memory.weights == -(-features // p) * (inputs + 1) * 4, layer.name
        data = layer_estimate(layer, Strategy.of(p, N=p), 64, MACHINE, ROOF)
        assert data.memory.weights == full


def _table_rows():
    rows = []
    for line in ASSETS.joinpath("vgg16_footprint.tsv").read_text().splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        cols = line.split("\t")
        m = re.fullmatch(r"\s*([\d.]+)\s*(MB|KB|K)\s*", cols[-1])
        if m is None:  # the header row
            continue
        dims = [int(x) for x in re.findall(r"\d+", cols[-2])]
        rows.append((cols[0], dims, float(m.group(1)), m.group(2)))
    return rows


def test_vgg16_activation_memory_matches_the_reference_footprint_table():
    """The VGG-16 memory-footprint table of CMU 15-418's "Parallel Deep Neural Networks" lecture, batch 1,
    fp32 (tests/assets/vgg16_footprint.tsv): per layer output size and memory.

    Sizes must match exactly. The memory column is rounded on the slide (e.g. 784 KiB is printed as
    766 KB), so bytes are compared within 2.5%, in binary units (KB = KiB, MB = MiB)."""
    net = load_network("vgg16")
    rows = _table_rows()[1:]  # the first row is the input image
    layers = [l for l in net.layers if l.op in ("conv2d", "maxpool2d", "linear")]
    assert len(rows) - 1 == len(layers)  # the last row is the softmax
    for (label, dims, value, unit), layer in zip(rows, layers):
        got = 4 * prod(layer.out_shape)  # the output tensor's bytes, the table's column
        n = 1
        for d in dims:
            n *= d
        assert sorted(dims) == sorted(x for x in layer.out_shape if x > 1), (label, layer.name)
        assert got == 4 * n
        expect = value * (2**20 if unit == "MB" else 2**10)
        assert got == pytest.approx(expect, rel=0.025), (label, layer.name, got, expect)


def test_uniform_fallback_is_reported():
    net = load_network("resnet50")
    strategies, fallbacks = uniform_strategies(net, 8, 64, "filter")
    assert fallbacks and all(f.used.startswith("N=") for f in fallbacks)
    convs = [l for l in net.layers if l.op == "conv2d"]
    assert all(strategies[l.name].label == "F=8" for l in convs)


def test_channel_split_reduces_partial_sums_and_filter_split_input_grads():
    net = load_network("resnet18")
    conv = next(l for l in net.layers if l.op == "conv2d" and l.name.endswith("conv2"))
    c = layer_estimate(conv, Strategy.of(4, C=4), 32, MACHINE, ROOF)
    f = layer_estimate(conv, Strategy.of(4, F=4), 32, MACHINE, ROOF)
    assert [x.purpose for x in c.comms] == ["partial_sum"]
    assert c.comms[0].nbytes == 32 * conv.out_shape[0] * conv.out_shape[1] * conv.out_shape[2] * 4
    assert [x.purpose for x in f.comms] == ["input_grad"]
    assert c.memory.weights == f.memory.weights == conv.num_params * 4 // 4


def test_step_calls_follow_the_executor_and_each_calls_two_predecessors_wrap_around():
    """costmodel.compute.call_context: the step's kernel calls in the executor's order (forward in network order,
    backward reversed, updates last), and the two calls just before each, around the step (of a
    call made more than once, the run whose two move the median bytes, the lower of an even count)."""
    from costmodel.calls.kernel_call import KernelCall
    from costmodel.compute.call_context import preceding_calls, step_calls
    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 8, "data")
    calls = step_calls(net, 8, strategies, {})
    kinds = [c.kernel for c in calls]
    assert kinds[0] == "conv2d.fwd" and kinds[-1] == "sgd.update"
    assert kinds.index("softmax_xent.fwd") < kinds.index("softmax_xent.bwd") < kinds.index("sgd.update")
    last_fwd = max(i for i, k in enumerate(kinds) if k.endswith(".fwd"))
    assert kinds[last_fwd + 1] == "softmax_xent.bwd" and kinds[last_fwd + 2] == "linear.bwd_data"
    assert sum(k == "sgd.update" for k in kinds) == 2 * 5  # weight and bias of 2 convs and 3 linears

    def call(name, nbytes):
        return KernelCall(name, (nbytes,), "float32", "", 0, nbytes)
    a, b, c, d = call("a", 1), call("b", 10), call("c", 100), call("d", 1000)
    before = preceding_calls([a, b, c, d, b])
    assert before[a.key] == (d, b) and before[c.key] == (a, b) and before[d.key] == (b, c)
    assert before[b.key] == (b, a)  # of its two runs' windows, (b, a) moves 11 bytes and (c, d) 1100
    assert preceding_calls([]) == {}


def test_an_output_several_layers_read_costs_a_gradient_sum_per_extra_reader():
    """The executor adds each reader's gradient of a shared output to the sum of those before it
    (executor.runtime.stage._scatter_grads); the model prices one ``add.fwd`` of the producer's local
    output per reader after the first, in the producer's backward compute, and the step's call
    order (costmodel.compute.call_context) has each sum right after the reader whose gradient it adds."""
    from costmodel.calls.layer_calls import add_call
    from costmodel.parallel.shard import local_layer
    from costmodel.compute.call_context import step_calls
    from tests.support.cases import load
    from networks.analysis import consumers
    net = load("tinyres")
    readers = consumers(net)
    assert readers["stem_relu"] == 2 and readers["b1_relu"] == 3 and readers["stem"] == 1
    assert readers["loss"] == 0 and "image" not in readers
    strategies, _ = uniform_strategies(net, 2, 8, "data")
    pred = predict_step(net, 8, strategies, {}, MACHINE, ROOF)
    rows = {r.layer.name: r.layer for r in pred.layers}
    by_name = {layer.name: layer for layer in net.layers}
    for name, extra in (("stem_relu", 1), ("b1_relu", 2)):
        local = local_layer(by_name[name], strategies[name], 8)
        one = ROOF.call_s(add_call(local.batch * 8 * 8 * 8, "float32"))
        assert one > 0 and rows[name].grad_sum_s == pytest.approx(extra * one)
        alone = layer_estimate(by_name[name], strategies[name], 8, MACHINE, ROOF)
        assert rows[name].bwd_compute_s == pytest.approx(alone.bwd_compute_s + extra * one)
    assert all(rows[n].grad_sum_s == 0.0 for n in readers if readers[n] <= 1)

    kinds = [(c.kernel, c.shape) for c in step_calls(net, 8, strategies, {})]
    sums = [i for i, k in enumerate(kinds) if k == ("add.fwd", (4 * 8 * 8 * 8,))]
    # forward: b1_add's own add; backward: b1_relu's two sums (after br_b's and br_a's backward)
    # and stem_relu's (after b1_conv1's backward; b1_add's came first)
    assert len(sums) == 1 + 2 + 1
    first_bwd = [k for k, _ in kinds].index("softmax_xent.bwd")
    assert sums[0] < first_bwd < sums[1]
    # each backward sum follows its reader's weight gradient: br_b (3x3, 4 filters), br_a (1x1),
    # then b1_conv1 (3x3, 8 filters); shape fields (n, c, h, w, f, kh, ...)
    after = [kinds[i - 1] for i in sums[1:]]
    assert [(k, shape[4], shape[5]) for k, shape in after] == [("conv2d.bwd_weights", 4, 3),
                                                               ("conv2d.bwd_weights", 4, 1),
                                                               ("conv2d.bwd_weights", 8, 3)]


def test_collectives_timed_in_a_run_price_exactly_those_collectives():
    """costmodel.step.collective_calls lists every collective a step prices (its layers' collectives, cold
    unless a gradient sync, and the reshards' Alltoallv); given times for them (Machine.measured,
    as `dnnplan execute --fresh-profile` measures them) the prediction uses exactly those, and
    keeps the fits for any collective without one."""
    from dataclasses import replace

    from costmodel.step.collective_calls import step_collectives
    from costmodel.layer.edge import edge_estimate, reshard_exchange
    from costmodel.parallel.shard import input_layout, output_layout
    net = load_network("lenet5")
    machine = load_machine("dgx-h100")
    compute = Roofline(machine)
    strategies, _ = uniform_strategies(net, 2, 16, "filter")  # F=2 where there are weights, else N=2
    strategies["fc3"] = strategies["relu4"]  # data parallel: a weight-gradient allreduce
    pred = predict_step(net, 16, strategies, {}, machine, compute)
    calls = step_collectives(net, 16, strategies, pred)
    kinds = {(c.collective, c.state) for c in calls}
    assert {("alltoallv", "cold"), ("allreduce", "cold"), ("allreduce", "warm")} <= kinds
    assert all(c.group == 2 and c.nbytes > 0 for c in calls) and len(set(calls)) == len(calls)
    # each cold call carries the kernels the step runs just before it (profiler.in_step.collectives runs them)
    assert all(c.after == () for c in calls if c.state == "warm")
    befores = {tuple(k.kernel for k in c.after) for c in calls if c.state == "cold"}
    # every cold call has kernels before it: after flatten (no kernels) the pooling's before it
    assert all(len(b) <= 2 for b in befores) and all(befores)
    from costmodel.step.collective_calls import COMM_PREFIX, comm_measured_key
    assert all(c.key.startswith(COMM_PREFIX) and comm_measured_key(c.key) == c.measured_key for c in calls)
    assert ("conv2d.bwd_data", "conv2d.bwd_weights") in befores  # F=2: the input-gradient partial sums
    assert ("relu.fwd",) in befores or ("maxpool2d.fwd",) in befores  # a reshard into the next layer
    value = {c.measured_key: (i + 1) * 1e-3 for i, c in enumerate(calls)}  # distinct, far from the fits
    timed = replace(machine, measured=tuple(value.items()))
    again = predict_step(net, 16, strategies, {}, timed, compute)
    comms = [c for row in again.layers for c in row.layer.comms]
    assert comms
    for c in comms:
        assert c.seconds == value[(c.collective, c.nbytes, c.group, "warm" if c.phase == "sync" else "cold")]
    by = {layer.name: layer for layer in net.layers}
    moved = 0
    for layer in net.layers:
        for slot, src in enumerate(layer.inputs):
            if src not in by:
                continue
            edge = edge_estimate(by[src], strategies[src], layer, strategies[layer.name], slot, 16, timed)
            a = output_layout(by[src], strategies[src], 16)
            b = input_layout(layer, strategies[layer.name], 16, slot)
            for secs, (s, d, back) in ((edge.fwd_s, (a, b, False)), (edge.bwd_s, (b, a, True))):
                nbytes, group = reshard_exchange(s, d, back, 4)
                if nbytes:
                    moved += 1
                    assert secs == value[("alltoallv", nbytes, group, "cold")]
    assert moved >= 2
    # without a time for the Alltoallvs, the reshards keep their fitted cost; the rest stays timed
    partial = replace(machine, measured=tuple((k, v) for k, v in value.items() if k[0] != "alltoallv"))
    mixed = predict_step(net, 16, strategies, {}, partial, compute)
    assert [r.reshard_s for r in mixed.layers] == pytest.approx([r.reshard_s for r in pred.layers])
    assert [r.layer.comms for r in mixed.layers] == [r.layer.comms for r in again.layers]


def test_a_call_the_step_makes_in_several_contexts_is_timed_in_each_and_priced_where_each_layer_makes_it():
    """costmodel.compute.call_context.occurrences: a key met after different calls in different places of the step
    gets one more call to time per other context (keyed apart, same kernel and operands), and each
    layer's occurrence maps to the key whose samples price it there (its own for the median
    context, :func:`preceding_calls`); keys met in one context, gradient sums and updates get
    none. ProfiledCompute prices a layer's pass by its occurrence's entry when one is installed."""
    from costmodel.calls.kernel_call import KernelCall
    from costmodel.calls.layer_calls import kernel_calls
    from costmodel.parallel.shard import local_layer
    from costmodel.compute.profile_table import Entry, ProfileTable
    from costmodel.compute.profiled import ProfiledCompute
    from costmodel.compute.call_context import (InContext, is_occurrence_key, occurrence_key, occurrences, step_calls,
                                                step_calls_by_layer)

    def call(name, nbytes):
        return KernelCall(name, (nbytes,), "float32", "", 0, nbytes)
    a, b, c, r, s = call("a", 1), call("b", 10), call("c", 1000), call("relu.bwd", 5), call("sgd.update", 7)
    # r follows (s, a) moving 8 bytes, (b, c) 1010 and, as a gradient sum, (c, r) 1005: the median
    # context is the gradient sum's; b follows (a, r) and (r, r), the lower of two the median
    tagged = [("L1", a), ("L2", r), ("L3", b), ("L4", c), ("L5", r), ("", r), ("L6", b), ("L1", s)]
    extra, before, where = occurrences(tagged)
    assert [e.key for e in extra] == [f"{r.key}#0", f"{r.key}#1", f"{b.key}#1"]
    assert all(isinstance(e, InContext) and e.kernel == e.plain_key.split("|")[0] for e in extra)
    assert before == {f"{r.key}#0": (s, a), f"{r.key}#1": (b, c), f"{b.key}#1": (r, r)}
    assert where == {occurrence_key(r.key, "L2"): f"{r.key}#0", occurrence_key(r.key, "L5"): f"{r.key}#1",
                     occurrence_key(b.key, "L3"): b.key, occurrence_key(b.key, "L6"): f"{b.key}#1"}
    assert all(is_occurrence_key(k) for k in where) and not is_occurrence_key(r.key)
    assert occurrences([("L1", a), ("L2", b)]) == ([], {}, {})

    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 8, "data")
    tagged = step_calls_by_layer(net, 8, strategies, {})
    assert [x for _, x in tagged] == step_calls(net, 8, strategies, {})
    assert {name for name, x in tagged if x.kernel == "sgd.update"} == {"conv1", "conv2", "fc1", "fc2", "fc3"}
    relu = next(layer for layer in net.layers if layer.op == "relu")
    local = local_layer(relu, strategies[relu.name], 8)
    (fwd,) = kernel_calls(local, "fwd", "")
    own, there = Entry(1e-3, 1e-3, 0.1, 5, 0, fwd.bytes), Entry(2e-3, 3e-3, 0.1, 5, 0, fwd.bytes)
    table = ProfileTable({"device": "test"}, {fwd.key: own})
    assert ProfiledCompute(table, ROOF).pass_s(local, "fwd", "") == pytest.approx(1e-3)
    table = ProfileTable({"device": "test"}, {fwd.key: own, occurrence_key(fwd.key, relu.name): there})
    assert ProfiledCompute(table, ROOF).pass_s(local, "fwd", "") == pytest.approx(3e-3)
