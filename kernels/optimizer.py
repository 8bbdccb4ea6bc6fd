"""The optimiser step the executor runs and the profiler times: SGD with momentum, in place."""

from __future__ import annotations


def sgd_momentum_update(w, v, g, lr: float, momentum: float):
    """``v = momentum * v + g; w -= lr * v`` (PyTorch's SGD with momentum, no dampening), in place
    on ``w`` and ``v``. Returns them."""
    v *= momentum
    v += g
    w -= lr * v
    return w, v
