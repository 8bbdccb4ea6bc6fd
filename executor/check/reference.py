"""The single-process reference step: the whole batch on one process, the same weights, data and
kernels (the same convolution algorithm per layer), no MPI. ``--check`` compares the distributed
step-0 loss and weight gradients with this.

Written independently of the distributed ops (full tensors, the layer's own padding, no
collectives) so a distribution bug cannot hide in code both sides share. Dropout is the identity
here, as in check mode (its masks are drawn per shard; see executor.ops.pointwise).
"""

from __future__ import annotations

import numpy as np

from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM
from executor.check import reference_bn as bn, reference_moe as moe, reference_tokens as tokens
from executor.backend.device import on_device, on_host
from executor.runtime.precision import stored
from executor.runtime.synthetic import init_weights, make_inputs, make_labels
from kernels import activation as act, conv as convk, gemm, loss as lossk, norm, pool
from kernels.xp import module_of
from networks.errors import DnnplanError
from networks.ir import Layer, Network


def _pool_args(p: dict, op: str):
    stride = p["stride"] if p["stride"] is not None else p["kernel"]
    ph, pw = p["padding"]
    dil = p["dilation"] if op == "maxpool2d" else (1, 1)
    return p["kernel"], stride, (ph, ph, pw, pw), dil


def _forward(layer: Layer, xs, w: dict, algo: str, labels, rows=None):
    p, op = layer.p, layer.op
    x = xs[0]
    if op == "conv2d":
        ph, pw = p["padding"]
        pads = (ph, ph, pw, pw)
        y = convk.conv2d_forward(x, w["weight"], w.get("bias"), p["stride"], pads, p["dilation"],
                                 p["groups"], algo)
        return y, (x, pads)
    if op == "linear":
        return gemm.linear_forward(x, w["weight"], w.get("bias")), x
    if op == "embedding":
        return tokens.embedding_forward(x, w)
    if op == "attention":
        return tokens.attention_forward(x, w, p)
    if op == "moe":
        return moe.moe_forward(x, w, p, rows)
    if op == "maxpool2d":
        k, s, pads, dil = _pool_args(p, op)
        return pool.maxpool2d_forward(x, k, s, pads, dil, p["ceil_mode"])
    if op == "avgpool2d":
        k, s, pads, _ = _pool_args(p, op)
        return pool.avgpool2d_forward(x, k, s, pads, p["ceil_mode"], p["count_include_pad"])
    if op == "global_avgpool":
        return pool.global_avgpool_forward(x)
    if op == "batchnorm2d":
        return bn.forward(x, w["gamma"], w["beta"], p["eps"], rows)
    if op == "layernorm":
        return norm.layernorm_forward(x, w["gamma"], w["beta"], p["eps"])
    if op == "rmsnorm":
        return norm.rmsnorm_forward(x, w["gamma"], p["eps"])
    if op == "relu":
        return act.relu_forward(x)
    if op == "gelu":
        return act.gelu_forward(x)
    if op == "swiglu":
        return act.swiglu_forward(x)
    if op == "dropout":
        return x, None
    if op == "add":
        y = xs[0]
        for other in xs[1:]:
            y, _ = act.add_forward(y, other)
        return y, len(xs)
    if op == "concat":
        return act.concat_forward(list(xs), axis=p["axis"] + 1)
    if op == "flatten":
        return x.reshape(x.shape[0], -1), x.shape
    if op == "softmax_cross_entropy":
        return lossk.softmax_xent_forward(x, labels, int(np.prod(x.shape[:-1])))
    raise DnnplanError(f"the reference step cannot run op '{op}'", layer=layer.name)


def _backward(layer: Layer, dy, cache, w: dict, algo: str, rows=None):
    p, op = layer.p, layer.op
    if op == "conv2d":
        x, pads = cache
        args = (p["stride"], pads, p["dilation"], p["groups"], algo)
        dx = convk.conv2d_backward_data(dy, w["weight"], x.shape, *args)
        dw, db = convk.conv2d_backward_weights(dy, x, w["weight"].shape, *args, with_bias="bias" in w)
        return [dx], {"weight": dw, **({"bias": db} if "bias" in w else {})}
    if op == "linear":
        dx, dw, db = gemm.linear_backward(dy, cache, w["weight"], "bias" in w)
        return [dx], {"weight": dw, **({"bias": db} if "bias" in w else {})}
    if op == "embedding":
        return tokens.embedding_backward(dy, cache, w)
    if op == "attention":
        return tokens.attention_backward(dy, cache, w, p)
    if op == "moe":
        return moe.moe_backward(dy, cache, w, p)
    if op == "maxpool2d":
        return [pool.maxpool2d_backward(dy, cache)], {}
    if op == "avgpool2d":
        return [pool.avgpool2d_backward(dy, cache)], {}
    if op == "global_avgpool":
        return [pool.global_avgpool_backward(dy, cache)], {}
    if op == "batchnorm2d":
        dx, dg, db = bn.backward(dy, cache, rows)
        return [dx], {"gamma": dg, "beta": db}
    if op == "layernorm":
        dx, dg, db = norm.layernorm_backward(dy, cache)
        return [dx], {"gamma": dg, "beta": db}
    if op == "rmsnorm":
        dx, dg = norm.rmsnorm_backward(dy, cache)
        return [dx], {"gamma": dg}
    if op == "relu":
        return [act.relu_backward(dy, cache)], {}
    if op == "gelu":
        return [act.gelu_backward(dy, cache)], {}
    if op == "swiglu":
        return [act.swiglu_backward(dy, cache)], {}
    if op == "dropout":
        return [dy], {}
    if op == "add":
        return [dy] * cache, {}
    if op == "concat":
        return act.concat_backward(dy, cache), {}
    if op == "flatten":
        return [dy.reshape(cache)], {}
    if op == "softmax_cross_entropy":
        return [lossk.softmax_xent_backward(cache)], {}
    raise DnnplanError(f"the reference step cannot run op '{op}'", layer=layer.name)


def _layer_weights(layer: Layer, weights: dict) -> dict:
    """The layer's full weights; a tied LM head's ``weight`` is its embedding's token table."""
    w = {name: weights[(layer.name, name)] for name, _ in layer.weights}
    if layer.op == "linear" and layer.p.get("tied_to"):
        w["weight"] = weights[(layer.p["tied_to"], "tokens")]
    return w


def plan_shards(net: Network, strategies: dict, batch: int, micro_batches: int = 1) -> dict:
    """What the reference step takes from the plan, by layer: the sample shards of unsynchronised
    batch-norm layers (executor.check.reference_bn.sample_shards) and the sequence blocks a mixture
    of experts routes apart (executor.check.reference_moe.sequence_blocks)."""
    return {**bn.sample_shards(net, strategies, batch, micro_batches), **moe.sequence_blocks(net, strategies)}


#: Ops whose reference (executor.check.reference_tokens) is numpy code: a device reference of a
#: network with them runs on the host instead
HOST_ONLY_OPS = frozenset({"embedding", "attention", "moe"})


def on_device_possible(net: Network) -> bool:
    """Whether :func:`reference_step` can run ``net`` on a device (its kernels, its formats)."""
    return not any(layer.op in HOST_ONLY_OPS for layer in net.layers)


def _start(net: Network, batch: int, seed: int, dtype, device) -> tuple[dict, dict]:
    """The weights and inputs: in ``dtype`` on the host, or on ``device`` in each layer's and
    input's storage format (a 16-bit plan's layers in 16 bits; executor.runtime.precision)."""
    weights = init_weights(net, seed, np.float32 if device is not None else dtype)
    inputs = make_inputs(net, batch, seed)
    if device is None:
        return weights, {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in inputs.items()}
    dtypes = {layer.name: layer.dtype for layer in net.layers}
    weights = {key: stored(device, w, dtypes[key[0]]) for key, w in weights.items()}
    acts = {k: stored(device, v, net.input_spec(k).dtype if v.dtype.kind == "f" else v.dtype.name)
            for k, v in inputs.items()}
    return weights, acts


def reference_step(net: Network, batch: int, algorithms: dict[str, str], seed: int,
                   dtype=np.float32, device=None,
                   shards: dict | None = None) -> tuple[float, dict[tuple[str, str], np.ndarray]]:
    """Loss and every weight gradient (full tensors, before any update) of one training step, on
    the host in ``dtype``, or on ``device`` (a DeviceMemory backend: its kernels, the process's
    precision, the network's storage formats) with the gradients copied back. ``shards``: what the
    plan decides of the reference's numerics, by layer (:func:`plan_shards`)."""
    shards = shards or {}
    weights, acts = _start(net, batch, seed, dtype, device)
    caches = {}
    loss = 0.0
    for layer in net.layers:
        w = _layer_weights(layer, weights)
        labels = make_labels(layer, batch, seed) if layer.op == "softmax_cross_entropy" else None
        if labels is not None and device is not None:
            labels = on_device(device, labels)
        y, caches[layer.name] = _forward(layer, [acts[s] for s in layer.inputs], w,
                                         algorithms.get(layer.name) or DEFAULT_CONV_ALGORITHM, labels,
                                         shards.get(layer.name))
        if layer.op == "softmax_cross_entropy":
            loss = float(y)
        acts[layer.name] = y
    grads_out: dict[str, np.ndarray] = {}
    wgrads: dict[tuple[str, str], np.ndarray] = {}
    tied: dict[str, np.ndarray] = {}
    for layer in reversed(net.layers):
        if layer.op == "softmax_cross_entropy":
            dy = None
        else:
            dy = grads_out.pop(layer.name, None)
            if dy is None:
                dy = module_of(acts[layer.name]).zeros_like(acts[layer.name])
        w = _layer_weights(layer, weights)
        dxs, dws = _backward(layer, dy, caches[layer.name], w, algorithms.get(layer.name) or DEFAULT_CONV_ALGORITHM,
                             shards.get(layer.name))
        for (name, _), g in ((kv, dws[kv[0]]) for kv in layer.weights):
            wgrads[(layer.name, name)] = g
        if layer.p.get("tied_to"):  # a tied head's gradient of its embedding's token table
            tied[layer.p["tied_to"]] = dws["weight"]
        if layer.name in tied:
            wgrads[(layer.name, "tokens")] = wgrads[(layer.name, "tokens")] + tied.pop(layer.name)
        for src, dx in zip(layer.inputs, dxs):
            if net.input_spec(src) is not None:
                continue
            grads_out[src] = dx if src not in grads_out else grads_out[src] + dx
    if device is not None:
        return loss, {k: on_host(device, g) for k, g in wgrads.items()}
    return loss, {k: np.asarray(g) for k, g in wgrads.items()}
