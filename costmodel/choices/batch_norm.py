"""How batch normalisation's statistics are taken in training, a framework choice (pure).

* ``sync`` (the default, as PyTorch's SyncBatchNorm and ``dnnplan execute`` run it): each
  channel's mean and variance are taken over the whole batch, so every rank that holds part of a
  layer's samples (an N split) or part of its images (an H or W split) joins an allreduce of the
  statistics forward and one of their gradients backward, and the step equals one process's.
* ``local`` (PyTorch DDP's plain BatchNorm2d): each rank normalises by its own samples' statistics;
  an N split exchanges nothing. An H or W split still all-reduces the statistics over the ranks
  that share each sample's image (they hold parts of the same samples: a rank with a strip of an
  image cannot normalise it alone), so the statistics are those of each rank's sample shard.

The choice reaches the op's splits as data: :func:`with_batch_norm` marks each batchnorm2d layer
(``networks.ops.norm.SYNC``), as :func:`costmodel.choices.precision.with_precision` sets the storage format.
"""

from __future__ import annotations

from networks.errors import DnnplanError, short
from networks.ir import Network
from networks.ops.norm import SYNC, synced

BATCH_NORMS = {"sync": "statistics over the whole batch (SyncBatchNorm)",
               "local": "statistics over each rank's own samples (PyTorch DDP's BatchNorm2d)"}
DEFAULT_BATCH_NORM = "sync"


def check_batch_norm(name: str) -> str:
    if name not in BATCH_NORMS:
        raise DnnplanError(f"unknown --batch-norm {short(name)}", hint=f"use one of {', '.join(BATCH_NORMS)}")
    return name


def with_batch_norm(net: Network, name: str) -> Network:
    """``net`` with its batchnorm2d layers taking statistics as ``name`` says (unchanged for sync:
    an unmarked layer is synchronised, so networks and plans made before the choice read as before)."""
    if check_batch_norm(name) == DEFAULT_BATCH_NORM:
        return net
    return net.with_param("batchnorm2d", SYNC, False)


def batch_norm_of(net: Network) -> str:
    """The choice ``net`` was marked with (:func:`with_batch_norm`): local when any batchnorm2d
    layer is unsynchronised."""
    local = any(layer.op == "batchnorm2d" and not synced(layer.p) for layer in net.layers)
    return "local" if local else DEFAULT_BATCH_NORM
