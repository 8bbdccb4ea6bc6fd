"""The network a launch configuration trains: the one it names or ``--network`` names, its shape
checked against what the file states; or, when neither names one, the zoo transformer of the
shape the file states (Megatron-LM's arguments state the model's shape, not a name).

Shapes are compared as Megatron-LM's GPT model builds them (:class:`planner.export.megatron_model.GptShape`,
the defaults filled in: no ``--num-query-groups`` is as many groups as heads, no ``--kv-channels``
is the hidden size over the heads); the tokens a sequence and the positions are not compared (the
sequence length is a training choice: ``seq``), nor the vocabulary (the tokenizer's, which no
argument states).
"""

from __future__ import annotations

import re
from dataclasses import asdict

from networks.errors import DnnplanError
from networks.ir import Network
from networks.loader import load_network, spec_text, zoo_names
from planner.export.megatron_model import GptShape, gpt_shape
from planner.export.torchtitan import has_bias
from planner.launch_import.launch_config import LaunchConfig

#: the shape's fields compared, and how a message names each
COMPARED = {"num_layers": "transformer layers", "hidden_size": "hidden size", "heads": "attention heads",
            "query_groups": "key/value heads", "kv_channels": "head width", "ffn_hidden_size": "MLP hidden size",
            "swiglu": "SwiGLU MLP", "experts": "experts", "top_k": "experts a token", "rotary": "rotary positions",
            "rmsnorm": "RMSNorm", "untied": "an untied output layer"}


def compared(shape: GptShape) -> dict:
    """The fields of ``shape`` compared, Megatron's defaults filled in."""
    out = {k: v for k, v in asdict(shape).items() if k in COMPARED}
    out["query_groups"] = shape.query_groups or shape.heads
    out["kv_channels"] = shape.kv_channels or shape.hidden_size // shape.heads
    return out


def shape_difference(stated: GptShape, net: Network) -> str | None:
    """How the network's shape differs from the one stated, in words (the first field that
    differs), or None when they agree; a network that is not a transformer differs in its layers."""
    if not any(layer.op == "attention" for layer in net.layers):
        return f"{net.name} is not a transformer (no attention layer)"
    got, want = compared(stated), compared(gpt_shape(net))
    for key, words in COMPARED.items():
        if got[key] != want[key]:
            return f"the file states {_stated(words, got[key])}, and {net.name} has {_has(want[key])}"
    return None


def _stated(words: str, value) -> str:
    """A shape's field as the file states it: "experts 8", "RMSNorm", "no experts (a dense model)"."""
    if value is None or value is False:
        return f"no {words}" + (" (a dense model)" if words == "experts" else "")
    return words if value is True else f"{words} {value}"


def _has(value) -> str:
    return "none" if value is None or value is False else "one" if value is True else str(value)


def zoo_network_of(shape: GptShape) -> str | None:
    """The zoo network of ``shape`` (:func:`compared`), or None. The zoo's transformers differ in
    shape (tests/unit/planner/launch_import/test_launch_import.py holds it), so the first found is the one; the
    specs that write the hidden size and the layer count are tried first (loading every spec
    costs most of the command's time on a 405B configuration)."""
    numbers = re.compile(rf"\b({shape.hidden_size}|{shape.num_layers})\b")
    names = sorted(zoo_names(), key=lambda name: len(set(numbers.findall(spec_text(name)[0]))) < 2)
    for name in names:
        net = load_network(name)
        if any(layer.op == "attention" for layer in net.layers) and shape_difference(shape, net) is None:
            return name
    return None


def network_ref(config: LaunchConfig, given: str | None) -> str:
    """The network to predict ``config`` on: ``given`` (``--network``), else the one the file names,
    else the zoo network of the shape it states; one line naming the file when none is found, or
    when ``given`` and the file name different ones."""
    if given and config.network and given != config.network:
        raise DnnplanError(f"--network {given} and the file's {config.network} name different networks",
                           file=config.path, hint="leave --network out, or drop the file's")
    if given or config.network:
        return given or config.network
    found = zoo_network_of(config.shape) if config.shape is not None else None
    if found:
        return found
    flavor = next((i.reason.rpartition(":")[0] for i in config.ignored if i.option == "[model] flavor"), None)
    if flavor:  # the file names a flavor the zoo lacks: said, not "no network named"
        raise DnnplanError(f"[model] flavor: {flavor}", file=config.path,
                           hint="fix the flavor, or give --network: a zoo name (dnnplan networks), a spec or a "
                                "Hugging Face config.json")
    if config.shape is None:  # a DeepSpeed config: the training script builds the model
        raise DnnplanError("the file names no model and states no model shape", file=config.path,
                           hint="give --network: a zoo name (dnnplan networks), a spec or a Hugging Face config.json")
    raise DnnplanError("no network named, and no zoo network has the shape the file states", file=config.path,
                       hint="give --network: a zoo name (dnnplan networks), a spec or a Hugging Face config.json")


def check_shape(config: LaunchConfig, net: Network) -> None:
    """One line naming the file when the network differs from the shape the file states."""
    if config.shape is None:
        return
    why = shape_difference(config.shape, net)
    if why:
        raise DnnplanError(f"the network does not match the file: {why}", file=config.path,
                           hint="give the --network the file trains, or correct its model arguments")


def check_biases(config: LaunchConfig, net: Network) -> None:
    """One line naming the file where a torchtitan file would train ``net`` and ``net`` has biases:
    torchtitan's llama-style models have none (planner.export.torchtitan.check_model, which refuses
    to export such a plan), so the file trains another model than the one priced."""
    if config.framework != "torchtitan":
        return
    layer = next((layer for layer in net.layers if has_bias(layer)), None)
    if layer is not None:
        raise DnnplanError(f"{net.name}'s {layer.name} has biases, and torchtitan's llama-style models have none: the "
                           "file trains another model than this network", file=config.path,
                           hint="give --network the model without biases, or export the plan to Megatron-LM "
                                "(dnnplan export PLAN --to megatron)")
