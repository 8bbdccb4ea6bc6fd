"""Deterministic weights, inputs and labels, the same on every rank and in the reference.

Every tensor comes from its own generator, ``numpy.random.default_rng([seed, crc32(name)])``, so
a rank's shard equals the matching slice of the single-process tensor whatever the plan. The
FULL tensor is generated and then sliced to the local block: simple and exact, and cheap for the
small networks the executor runs (a 100M-parameter network would want counter-based generation
per block instead).

Scales keep activations O(1): He initialisation for conv and linear weights (std sqrt(2/fan_in)),
biases and BN shifts 0.1*N(0,1), BN scales 1 + 0.1*N(0,1), other weights (attention projections,
embedding tables) 0.02*N(0,1) as GPT-2; float inputs N(0,1), integer inputs (token ids) uniform over
the vocabulary of the embeddings reading them; labels uniform over the classes of the loss layer's
logits.
"""

from __future__ import annotations

import zlib

import numpy as np

from costmodel.parallel.layout import Region
from networks.errors import DnnplanError
from networks.ir import FLOAT_DTYPES, Layer, Network


def rng_for(seed: int, name: str) -> np.random.Generator:
    """A generator that depends only on ``seed`` and ``name`` (stable across runs and ranks)."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def init_weight(layer: Layer, weight: str, shape: tuple[int, ...], seed: int,
                dtype=np.float32) -> np.ndarray:
    """The full initial value of one weight."""
    g = rng_for(seed, f"weight/{layer.name}/{weight}")
    z = g.standard_normal(shape)
    if weight == "weight" and layer.op in ("conv2d", "linear"):
        fan_in = int(np.prod(shape[1:]))
        val = z * np.sqrt(2.0 / fan_in)
    elif weight == "gamma":
        val = 1.0 + 0.1 * z
    elif weight in ("bias", "beta"):
        val = 0.1 * z
    else:
        val = 0.02 * z
    return val.astype(dtype)


def init_weights(net: Network, seed: int, dtype=np.float32) -> dict[tuple[str, str], np.ndarray]:
    """Every weight of the network, full size: (layer, weight) -> array."""
    return {(layer.name, w): init_weight(layer, w, shape, seed, dtype)
            for layer in net.layers for w, shape in layer.weights}


def make_inputs(net: Network, batch: int, seed: int, dtype=np.float32) -> dict[str, np.ndarray]:
    """Every network input, full batch: name -> (batch, *shape) array."""
    out = {}
    for spec in net.inputs:
        g = rng_for(seed, f"input/{spec.name}")
        if spec.dtype in FLOAT_DTYPES:  # bfloat16 too (a bf16 plan's image)
            out[spec.name] = g.standard_normal((batch, *spec.shape)).astype(dtype)
        else:
            out[spec.name] = g.integers(0, _vocab_of(net, spec.name, spec.dtype), size=(batch, *spec.shape))
    return out


def _vocab_of(net: Network, name: str, dtype: str) -> int:
    """How many token ids an integer input may hold: the smallest vocabulary of the embeddings reading it."""
    vocabs = [layer.p["vocab"] for layer in net.layers if layer.op == "embedding" and name in layer.inputs]
    if not vocabs:
        raise DnnplanError(f"input '{name}' is {dtype}, but no embedding layer reads it",
                           hint="the executor feeds integer inputs only to embedding layers (token ids)")
    return min(vocabs)


def make_labels(layer: Layer, batch: int, seed: int) -> np.ndarray:
    """Labels of a loss layer: (batch,) or (batch, S), uniform over the last logit axis."""
    logits = layer.in_shapes[0]
    return rng_for(seed, f"labels/{layer.name}").integers(0, logits[-1], size=(batch, *logits[:-1]))


def take(full: np.ndarray, region: Region) -> np.ndarray:
    """A contiguous copy of ``region`` of ``full``."""
    return np.ascontiguousarray(full[tuple(slice(lo, hi) for lo, hi in region)])


def put(full: np.ndarray, region: Region, part: np.ndarray) -> None:
    full[tuple(slice(lo, hi) for lo, hi in region)] = part
