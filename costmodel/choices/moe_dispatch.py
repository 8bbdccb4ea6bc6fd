"""How an expert split moves its tokens, a framework choice (pure; docs/costmodel.md, "Mixture of
experts").

* ``alltoall`` (the default; Megatron-Core's ``moe_token_dispatcher_type: alltoall`` and what
  ``dnnplan execute`` runs): every (token, chosen expert) row in a capacity buffer, exchanged by
  all-to-all over the expert group (costmodel.comm.expert).
* ``flex`` (Megatron-Core's ``moe_token_dispatcher_type: flex`` with the DeepEP or HybridEP
  backend): each token sent once to each node and once to each rank holding any of its experts,
  across nodes to the rank of the same local index, then on within the node over NVLink, the two
  pipelined (costmodel.comm.expert). GPU libraries: priced on a GPU machine only.

The choice reaches the layers as data: :func:`with_moe_dispatch` marks each moe layer
(``networks.ops.moe.DISPATCH``), as :func:`costmodel.choices.batch_norm.with_batch_norm` marks the
batch-norm layers, so a plan records it and reads back the same network.
"""

from __future__ import annotations

from networks.errors import DnnplanError, short
from networks.ir import Network
from networks.ops.moe import DISPATCH, DISPATCHERS, dispatcher

DEFAULT_MOE_DISPATCH = DISPATCHERS[0]
MOE_DISPATCHES = {"alltoall": "every (token, expert) row in capacity buffers, by all-to-all (Megatron-Core's "
                              "alltoall dispatcher)",
                  "flex": "each token once to each node and rank holding its experts (Megatron-Core's flex "
                          "dispatcher: DeepEP, HybridEP)"}


def check_moe_dispatch(name: str) -> str:
    if name not in MOE_DISPATCHES:
        raise DnnplanError(f"unknown --moe-dispatch {short(name)}", hint=f"use one of {', '.join(MOE_DISPATCHES)}")
    return name


def with_moe_dispatch(net: Network, name: str) -> Network:
    """``net`` with its moe layers priced under the dispatcher ``name`` (unchanged for alltoall: an
    unmarked layer is all-to-all, so networks and plans made before the choice read as before)."""
    if check_moe_dispatch(name) == DEFAULT_MOE_DISPATCH:
        return net
    return net.with_param("moe", DISPATCH, name)


def moe_dispatch_of(net: Network) -> str:
    """The dispatcher ``net`` was marked with (:func:`with_moe_dispatch`): that of its first moe layer."""
    return next((dispatcher(layer.p) for layer in net.layers if layer.op == "moe"), DEFAULT_MOE_DISPATCH)


def check_machine_dispatch(name: str, kind: str, machine: str) -> None:
    """The flex dispatcher's libraries run on GPUs: refuse it on another machine."""
    if name != DEFAULT_MOE_DISPATCH and kind != "gpu":
        raise DnnplanError(f"--moe-dispatch {name} prices DeepEP or HybridEP, GPU libraries; machine '{machine}' is "
                           f"not a GPU machine", field="moe_dispatch",
                           hint="plan it on a GPU machine (--machine dgx-h100), or use --moe-dispatch alltoall")
