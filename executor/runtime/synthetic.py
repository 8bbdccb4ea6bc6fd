"""Deterministic weights, inputs and labels, the same on every rank and in the reference.

Every tensor comes from its own generator, ``numpy.random.default_rng([seed, crc32(name)])`` (a
large one from one generator per block of :data:`BLOCK` numbers, drawn on all the host's cores), so
a rank's shard equals the matching slice of the single-process tensor whatever the plan. The
FULL tensor is generated and then sliced to the local block: simple and exact (a Llama 3 8B
block's 1.3 billion weights in 8 s on two cores).

Scales keep activations O(1): He initialisation for conv and linear weights (std sqrt(2/fan_in)),
biases and BN shifts 0.1*N(0,1), BN scales 1 + 0.1*N(0,1), other weights (attention projections,
embedding tables) 0.02*N(0,1) as GPT-2; float inputs N(0,1), integer inputs (token ids) uniform over
the vocabulary of the embeddings reading them; labels uniform over the classes of the loss layer's
logits.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from costmodel.parallel.layout import Region
from networks.errors import DnnplanError
from networks.ir import FLOAT_DTYPES, Layer, Network


def rng_for(seed: int, name: str) -> np.random.Generator:
    """A generator that depends only on ``seed`` and ``name`` (stable across runs and ranks)."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


#: Draws per generator of a large tensor's: each block of this many numbers has its own generator,
#: so the blocks are drawn on the host's cores at once, the same numbers whatever their count
BLOCK = 1 << 22


def standard_normal(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """N(0, 1) in float32 of ``shape``, a function of ``seed`` and ``name`` only: one generator for a
    tensor up to :data:`BLOCK` numbers, else one per block drawn in threads (numpy draws without
    the interpreter's lock)."""
    n = int(np.prod(shape))
    if n <= BLOCK:
        return rng_for(seed, name).standard_normal(shape, dtype=np.float32)
    out = np.empty(n, dtype=np.float32)
    key = zlib.crc32(name.encode())

    def draw(k: int) -> None:
        np.random.default_rng([int(seed), key, k]).standard_normal(out=out[k * BLOCK:(k + 1) * BLOCK],
                                                                    dtype=np.float32)

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(draw, range(-(-n // BLOCK))))
    return out.reshape(shape)


def init_weight(layer: Layer, weight: str, shape: tuple[int, ...], seed: int,
                dtype=np.float32) -> np.ndarray:
    """The full initial value of one weight (drawn in float32 and scaled in place: a Llama 3 8B
    block's 1.3 billion weights take seconds, not the minute that float64 draws and copies took)."""
    val = standard_normal(seed, f"weight/{layer.name}/{weight}", shape)
    if weight == "weight" and layer.op in ("conv2d", "linear"):
        val *= np.float32(np.sqrt(2.0 / int(np.prod(shape[1:]))))
    elif weight == "gamma":
        val *= np.float32(0.1)
        val += np.float32(1.0)
    elif weight in ("bias", "beta"):
        val *= np.float32(0.1)
    else:
        val *= np.float32(0.02)
    return val if val.dtype == np.dtype(dtype) else val.astype(dtype)


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
