"""Adding an op touches five registries; this test holds them together (docs/architecture.md).

1. the op catalogue, ``networks.ops.catalogue.OPS`` (shape rule, weights, costs, splits);
2. the cost model's kernel calls, ``costmodel.calls.layer_calls.kernel_calls`` (what each pass runs);
3. the kernel registry, ``kernels.KERNELS`` (names like ``conv2d.fwd``);
4. the executor's distributed ops, ``executor.ops.OPS`` (forward, backward);
5. the single-process reference step, ``executor.check.reference.reference_step`` (``--check``).

Every op of the catalogue has executor ops, runs in the reference step, and has kernel calls whose
kernels exist, unless it is listed below with its reason. Each op is tried on a tiny network of its
own (:data:`SAMPLES`).
"""

from __future__ import annotations

import pytest

from costmodel.calls.algorithms import CONV_ALGORITHMS, algorithm_applies
from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM, grad_sum_calls, kernel_calls, PASSES, update_calls
from costmodel.calls.kernel_call import SHAPE_FIELDS
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import make_strategy
from executor.ops import OPS as EXECUTOR_OPS
from executor.check.reference import reference_step
from kernels import KERNELS
from kernels.conv import CONV_ALGORITHMS as KERNEL_CONV_ALGORITHMS
from networks.errors import DnnplanError
from networks.ir import Network
from networks.ops.catalogue import OPS
from networks.spec import parse_network

#: Ops the planner prices but the executor cannot run yet (neither the distributed ops nor the
#: reference step), each with its reason. The test checks that they are still refused, so an op
#: leaves this list when the executor learns it.
PLANNED_ONLY: dict[str, str] = {}

#: Ops that run no timed kernel, so the cost model lists no kernel call for them (each with its
#: reason); every other op lists at least one call in some pass.
NO_KERNEL: dict[str, str] = {
    "flatten": "a reshape: a view of its input, no kernel runs",
    "embedding": "a gather: priced by the compute model's fallback, not a timed kernel",
}

BATCH = 2
_IMAGE = "image: {shape: [3, 8, 8]}"
_VECTOR = "x: {shape: [16]}"
_SEQUENCE = "x: {shape: [6, 16]}"
_TOKENS = "tokens: {shape: [6], dtype: int64}"
_CONV = "{name: conv, op: conv2d, filters: 4, kernel: 3, padding: 1}"
_HIDDEN = "{name: hidden, op: linear, features: 8}"
_HEAD = ["{name: fc, op: linear, features: 5}", "{name: loss, op: softmax_cross_entropy}"]
_IMAGE_HEAD = ["{name: flat, op: flatten}", *_HEAD]
_BRANCHES = ["{name: a, op: linear, features: 8, inputs: x}", "{name: b, op: linear, features: 8, inputs: x}"]

#: A tiny network using each op of the catalogue: (its input, its layers).
SAMPLES: dict[str, tuple[str, list[str]]] = {
    "conv2d": (_IMAGE, [_CONV, *_IMAGE_HEAD]),
    "linear": (_VECTOR, _HEAD),
    "relu": (_VECTOR, [_HIDDEN, "{name: act, op: relu}", *_HEAD]),
    "gelu": (_VECTOR, [_HIDDEN, "{name: act, op: gelu}", *_HEAD]),
    "dropout": (_VECTOR, [_HIDDEN, "{name: drop, op: dropout, rate: 0.5}", *_HEAD]),
    "maxpool2d": (_IMAGE, [_CONV, "{name: pool, op: maxpool2d, kernel: 2}", *_IMAGE_HEAD]),
    "avgpool2d": (_IMAGE, [_CONV, "{name: pool, op: avgpool2d, kernel: 3, stride: 2, padding: 1}",
                           *_IMAGE_HEAD]),
    "global_avgpool": (_IMAGE, [_CONV, "{name: gap, op: global_avgpool}", *_IMAGE_HEAD]),
    "batchnorm2d": (_IMAGE, [_CONV, "{name: bn, op: batchnorm2d}", *_IMAGE_HEAD]),
    "layernorm": (_SEQUENCE, ["{name: ln, op: layernorm}", *_HEAD]),
    "rmsnorm": (_SEQUENCE, ["{name: rms, op: rmsnorm}", *_HEAD]),
    "swiglu": (_VECTOR, [_HIDDEN, "{name: act, op: swiglu}", *_HEAD]),
    "add": (_VECTOR, [*_BRANCHES, "{name: sum, op: add, inputs: [a, b]}", *_HEAD]),
    "concat": (_VECTOR, [*_BRANCHES, "{name: cat, op: concat, inputs: [a, b]}", *_HEAD]),
    "flatten": (_IMAGE, _IMAGE_HEAD),
    "embedding": (_TOKENS, ["{name: embed, op: embedding, vocab: 11, dim: 8, positions: 6}", *_HEAD]),
    "attention": (_SEQUENCE, ["{name: attn, op: attention, heads: 2, causal: true}", *_HEAD]),
    "moe": (_SEQUENCE, ["{name: moe, op: moe, experts: 4, top_k: 2, hidden: 8, shared_experts: 1}", *_HEAD]),
    "softmax_cross_entropy": (_VECTOR, _HEAD),
}


def sample(op: str) -> Network:
    """The tiny network of :data:`SAMPLES` that uses ``op``."""
    assert op in SAMPLES, (f"op '{op}' of the catalogue has no tiny network in {__name__}.SAMPLES; "
                           "add one so that the registries can be checked for it")
    inputs, layers = SAMPLES[op]
    text = "\n".join([f"name: sample-{op}", "inputs:", f"  {inputs}", "layers:", *(f"  - {x}" for x in layers)])
    net = parse_network(text, f"<sample of {op}>")
    assert any(layer.op == op for layer in net.layers), f"the sample of '{op}' does not use it"
    return net


def test_every_list_names_catalogue_ops():
    for name, listed in (("PLANNED_ONLY", PLANNED_ONLY), ("NO_KERNEL", NO_KERNEL), ("SAMPLES", SAMPLES),
                         ("executor.ops.OPS", EXECUTOR_OPS)):
        stray = sorted(set(listed) - set(OPS))
        assert not stray, f"{name} names {stray}, not in the op catalogue (networks.ops.catalogue.OPS)"


def test_every_kernel_the_cost_model_can_name_exists():
    missing = sorted(set(SHAPE_FIELDS) - set(KERNELS))
    assert not missing, f"costmodel.calls.kernel_call.SHAPE_FIELDS names {missing}, which kernels.KERNELS lacks"


@pytest.mark.parametrize("op", sorted(OPS))
def test_the_executor_has_the_op(op):
    if op in PLANNED_ONLY:
        assert op not in EXECUTOR_OPS, (f"executor.ops.OPS now runs '{op}': remove it from PLANNED_ONLY "
                                        f"({PLANNED_ONLY[op]})")
    else:
        assert op in EXECUTOR_OPS, (f"op '{op}' is in the catalogue but executor.ops.OPS has no forward and "
                                    "backward for it (or list it in PLANNED_ONLY, with the reason)")


@pytest.mark.parametrize("op", sorted(OPS))
def test_the_reference_step_runs_the_op(op):
    net = sample(op)
    if op in PLANNED_ONLY:
        with pytest.raises(DnnplanError):
            reference_step(net, BATCH, {}, seed=0)
        return
    try:
        loss, grads = reference_step(net, BATCH, {}, seed=0)
    except DnnplanError as err:
        pytest.fail(f"op '{op}' is in the catalogue but executor.check.reference cannot run it: {err}")
    assert loss > 0
    assert set(grads) == {(layer.name, w) for layer in net.layers for w, _ in layer.weights}


def _pass_calls(layer) -> list:
    """The kernel calls of a layer's three passes on one device, under each algorithm it can take."""
    local = local_layer(layer, make_strategy(1, {}), BATCH)
    algos = [a for a in CONV_ALGORITHMS if algorithm_applies(layer, a)] if layer.op == "conv2d" else [""]
    return [c for a in algos for pass_ in PASSES for c in kernel_calls(local, pass_, a)]


def _step_calls(layer) -> list:
    """Besides the passes: the optimiser step of its weights and the sum of two readers' gradients."""
    local = local_layer(layer, make_strategy(1, {}), BATCH)
    return [*update_calls(local), *grad_sum_calls(local, 2)]


@pytest.mark.parametrize("op", sorted(OPS))
def test_the_kernel_calls_name_registered_kernels(op):
    layers = [layer for layer in sample(op).layers if layer.op == op]
    passes = [c for layer in layers for c in _pass_calls(layer)]
    if op in NO_KERNEL:
        assert not passes, (f"costmodel.calls.layer_calls now lists kernels for '{op}': remove it from NO_KERNEL "
                            f"({NO_KERNEL[op]})")
    else:
        assert passes, (f"op '{op}' is in the catalogue but costmodel.calls.layer_calls lists no kernel call for it "
                        "(or list it in NO_KERNEL, with the reason)")
    for call in passes + [c for layer in layers for c in _step_calls(layer)]:
        assert call.kernel in KERNELS, (f"costmodel.calls.layer_calls names kernel '{call.kernel}' for op '{op}', "
                                        "which kernels.KERNELS lacks")


def test_the_cost_model_and_the_kernels_know_the_same_convolution_algorithms():
    """The cost model prices exactly the algorithms the kernels run, and its default is one of them."""
    assert tuple(CONV_ALGORITHMS) == tuple(KERNEL_CONV_ALGORITHMS)
    assert DEFAULT_CONV_ALGORITHM in KERNEL_CONV_ALGORITHMS
