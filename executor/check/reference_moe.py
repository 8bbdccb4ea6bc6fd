"""The reference step's mixture of experts on whole tensors (one process, every expert), for
``--check`` (executor.check.reference).

Written apart from the distributed op (executor.ops.moe): no dispatch buffers and no all-to-all;
each sequence is routed token by token in plain Python (the softmax, the top-k, each expert's
capacity filled first choices first, in sequence order, as kernels.moe states it), each expert runs
over the list of rows routed to it, and the router's gradient is the softmax's Jacobian written
out. The expert MLP kernel is the same (kernels.moe.experts_forward/backward).

Under a plan that splits the layer's sequence (H), each rank routes its own block of positions with
the capacity of that block, as Megatron-Core counts capacity over a rank's own tokens (and as the
cost model prices it, costmodel.calls.moe): :func:`sequence_blocks` gives the blocks and the
reference routes each apart, so that the check compares the same routing.
"""

from __future__ import annotations

import numpy as np

from costmodel.parallel.axes import H
from costmodel.parallel.layout import interval
from costmodel.parallel.strategy import Strategy
from kernels import moe as k
from networks.errors import DnnplanError
from networks.ir import Network

Blocks = tuple[tuple[int, int], ...]


def sequence_blocks(net: Network, strategies: dict[str, Strategy]) -> dict[str, Blocks]:
    """Each mixture of experts over a split sequence: its blocks of positions ``[a, b)``, one a
    sequence rank (costmodel.parallel.layout.interval); a layer over whole sequences is left out."""
    out = {}
    for layer in net.layers:
        c = strategies[layer.name].degree(H) if layer.op == "moe" else 1
        if c > 1:
            s = layer.in_shapes[0][0]
            out[layer.name] = tuple(interval(s, c, i) for i in range(c))
    return out


def _routes(probs: np.ndarray, top_k: int, cap: int) -> list[tuple[int, int, int, int]]:
    """(sample, token, choice, expert) of every row kept within capacity."""
    n, s, e = probs.shape
    kept = []
    for b in range(n):
        order = [sorted(range(e), key=lambda j, t=t: (-probs[b, t, j], j))[:top_k] for t in range(s)]
        filled = [0] * e
        for c in range(top_k):
            for t in range(s):
                j = order[t][c]
                if filled[j] < cap:
                    filled[j] += 1
                    kept.append((b, t, c, j))
    return kept


def moe_forward(x: np.ndarray, w: dict, p: dict, blocks: Blocks | None = None):
    """``blocks``: the positions each sequence rank routes apart (module docstring); None: whole sequences."""
    if p["bias"] or p["shared_gate"]:
        raise DnnplanError("the reference step cannot run a mixture of experts with biases or a shared-expert gate")
    n, s, d = x.shape
    logits = x @ w["router"].T
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = z / z.sum(axis=-1, keepdims=True)
    kept = [(b, lo + t, c, j) for lo, hi in (blocks or ((0, s),))
            for b, t, c, j in _routes(probs[:, lo:hi], p["top_k"],
                                      k.capacity(p["capacity_factor"], hi - lo, p["top_k"], p["experts"]))]
    y = np.zeros_like(x)
    per_expert = {}
    for j in range(p["experts"]):
        mine = [r for r in kept if r[3] == j]
        if not mine:
            continue
        rows = np.stack([x[b, t] for b, t, _, _ in mine])[None]
        out, cache = k.experts_forward(rows, w["w_in"][j:j + 1], w["w_out"][j:j + 1], p["activation"], p["gated"])
        per_expert[j] = (mine, out[0], cache)
        for (b, t, _, _), o in zip(mine, out[0]):
            y[b, t] += probs[b, t, j] * o
    shared = None
    if "shared_in" in w:
        sy, shared = k.experts_forward(x.reshape(1, n * s, d), w["shared_in"][None], w["shared_out"][None],
                                       p["activation"], p["gated"])
        y += sy.reshape(x.shape)
    return y, (x, probs, per_expert, shared)


def moe_backward(dy: np.ndarray, cache, w: dict, p: dict):
    x, probs, per_expert, shared = cache
    n, s, d = x.shape
    dx = np.zeros_like(x)
    dprobs = np.zeros_like(probs)
    grads = {"w_in": np.zeros_like(w["w_in"]), "w_out": np.zeros_like(w["w_out"])}
    for j, (mine, out, ecache) in per_expert.items():
        dout = np.stack([probs[b, t, j] * dy[b, t] for b, t, _, _ in mine])[None]
        for (b, t, _, _), o in zip(mine, out):
            dprobs[b, t, j] += float(np.dot(dy[b, t], o))
        drows, dwi, dwo = k.experts_backward(dout, ecache, w["w_in"][j:j + 1], w["w_out"][j:j + 1],
                                             p["activation"], p["gated"])
        grads["w_in"][j], grads["w_out"][j] = dwi[0], dwo[0]
        for (b, t, _, _), g in zip(mine, drows[0]):
            dx[b, t] += g
    # softmax Jacobian: dlogit_i = sum_j dprob_j p_j (delta_ij - p_i)
    dlogits = np.einsum("nsj,nsj,nsji->nsi", dprobs, probs, np.eye(probs.shape[-1])[None, None] - probs[..., None, :])
    dx += dlogits @ w["router"]
    grads["router"] = dlogits.reshape(-1, dlogits.shape[-1]).T @ x.reshape(-1, d)
    if shared is not None:
        dsx, dsi, dso = k.experts_backward(dy.reshape(1, n * s, d), shared, w["shared_in"][None], w["shared_out"][None],
                                           p["activation"], p["gated"])
        dx += dsx.reshape(x.shape)
        grads |= {"shared_in": dsi[0], "shared_out": dso[0]}
    return [dx], grads
