"""A plan file's layer entries, each checked against its layer: its strategy (the degrees fit the
layer, the devices and the batch), its algorithm (one the layer's op takes), recomputation (a layer
recomputed alone keeps something of its own) and its numbers; and the one-line mistake any field of
a plan file makes (:func:`fail`, naming the file, the layer and the field)."""

from __future__ import annotations

from costmodel.calls.algorithms import (CONV_ALGORITHMS, RECOMPUTE, algorithm_applies, is_recomputed, kernel_algorithm,
                                        recompute_applies)
from costmodel.calls.attention import ATTENTION_ALGORITHMS
from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM
from costmodel.memory.recompute import checkpointed_blocks
from costmodel.parallel.shard import check_fits
from costmodel.parallel.strategy import make_strategy
from networks.analysis import block_of
from networks.errors import DnnplanError, short
from networks.ir import Layer, Network
from planner.plan.plan import LayerPlan

LAYER_KEYS = ("name", "strategy", "algorithm", "fwd_s", "bwd_s", "comm_s", "memory_bytes", "alternatives")


def fail(msg: str, path: str, layer: str | None = None, field: str | None = None, hint: str | None = None):
    return DnnplanError(msg, file=path, layer=layer, field=field, hint=hint)


def number(entry: dict, key: str, path: str, layer: str | None = None) -> float:
    """``entry[key]`` (0 when absent): seconds or bytes, a finite number from 0 to 10^30."""
    value = entry.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e30:
        raise fail(f"'{key}' must be a number from 0 to 1e30, got {short(value)}", path, layer=layer, field=key)
    return float(value)


def layer_entries(layers_raw, net: Network, path: str, remake: str) -> dict:
    """The plan's layer entries by name, exactly one for each layer of ``net``."""
    if not isinstance(layers_raw, list):
        raise fail("'layers' must be a list", path, field="layers")
    by_name = {}
    for entry in layers_raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise fail("each layer entry needs a 'name' (the layer's name, text)", path, field="layers")
        name = entry["name"]
        for key in entry:
            if key not in LAYER_KEYS:
                raise fail(f"unknown key '{key}'", path, layer=str(name), field=key)
        if name in by_name:  # one would silently win over the other
            raise fail(f"layer {short(name)} is listed twice", path, layer=name, field="layers",
                       hint="keep one entry for it")
        by_name[name] = entry
    names = [l.name for l in net.layers]
    missing = [n for n in names if n not in by_name]
    extra = [n for n in by_name if n not in names]
    if missing and not extra and names[-len(missing):] == missing and len(missing) < len(names):
        raise fail(f"the plan ends after layer '{names[-len(missing) - 1]}', {len(missing)} of the network's "
                    f"{len(names)} layers short (was it cut short?)", path, field="layers",
                    hint=f"make it again with `{remake}`")
    if missing and extra:  # an entry renamed, or the plan of another network: both names said
        raise fail(f"the plan has no entry for layer '{missing[0]}', and names layer {short(extra[0])} the network "
                   "lacks" + (f" ({len(extra)} such)" if len(extra) > 1 else ""), path, layer=missing[0],
                   field="layers", hint=f"rename {short(extra[0])} back to '{missing[0]}' if it was edited, else "
                                        "re-plan it for this network")
    if missing or extra:
        what = f"has no entry for layer '{missing[0]}'" if missing else f"names layer {short(extra[0])} the network lacks"
        raise fail(f"the plan {what}", path, layer=(missing or extra)[0], field="layers",
                    hint="re-plan it for this network")
    return by_name


def layer_plan(layer: Layer, entry: dict, p: int, batch: int, path: str) -> LayerPlan:
    """One layer's entry, its strategy and algorithm checked against the layer."""
    degrees = entry.get("strategy") or {}
    if not isinstance(degrees, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in degrees.values()):
        raise fail("'strategy' must map dimensions to integer degrees, e.g. {N: 4, F: 2}", path,
                    layer=layer.name, field="strategy")
    try:
        strat = make_strategy(p, {str(k): v for k, v in degrees.items()})
    except DnnplanError as err:
        raise fail(err.bare, path, layer=layer.name, field="strategy", hint=err.hint) from None
    why = check_fits(layer, strat, batch)
    if why:
        raise fail(f"strategy {strat.label} does not fit: {why}", path, layer=layer.name, field="strategy")
    algo = entry.get("algorithm") or ""
    if not isinstance(algo, str):
        raise fail(f"'algorithm' must be a name, got {short(algo)}", path, layer=layer.name, field="algorithm",
                    hint="e.g. im2col for a convolution, flash for attention, or leave it out")
    if layer.op == "attention":
        if kernel_algorithm(algo) not in ("", *ATTENTION_ALGORITHMS):
            raise fail(f"attention algorithm {short(kernel_algorithm(algo))} is not one dnnplan prices", path,
                        layer=layer.name, field="algorithm",
                        hint="use flash or materialized (with +recompute to recompute the layer)")
    elif is_recomputed(algo):
        pass
    elif layer.op == "conv2d":
        algo = algo or DEFAULT_CONV_ALGORITHM
        if algo not in CONV_ALGORITHMS:
            raise fail(f"unknown convolution algorithm {short(algo)}", path, layer=layer.name, field="algorithm",
                       hint=f"use one of {', '.join(CONV_ALGORITHMS)} (or leave it out: {DEFAULT_CONV_ALGORITHM})")
        if not algorithm_applies(layer, algo):
            raise fail(f"convolution algorithm '{algo}' cannot run this layer", path, layer=layer.name,
                        field="algorithm", hint="direct and im2col run every convolution")
    elif algo:
        raise fail(f"only conv2d and attention layers take an algorithm, not {layer.op}", path, layer=layer.name,
                    field="algorithm", hint=f"a {layer.op} layer takes none" + (
                        f", or '{RECOMPUTE}'" if recompute_applies(layer) else ""))
    fwd, bwd, comm, memory = (number(entry, key, path, layer.name) for key in ("fwd_s", "bwd_s", "comm_s",
                                                                                 "memory_bytes"))
    return LayerPlan(layer.name, strat, algo, fwd, bwd, comm, int(memory), _alternatives(entry, layer, path))


def check_recomputed(net: Network, lps: tuple[LayerPlan, ...], path: str) -> None:
    """A layer recomputed alone must keep something of its own for backward (attention's core, a
    dropout's mask: :func:`costmodel.calls.algorithms.recompute_applies`); a layer that keeps nothing
    (a norm, a residual add) is recomputed only with the rest of its block, which is then
    checkpointed at its input (full recomputation, :func:`costmodel.memory.recompute.checkpointed_blocks`)."""
    algorithms = {lp.name: lp.algorithm for lp in lps}
    whole = checkpointed_blocks(net, algorithms)
    for layer in net.layers:
        if is_recomputed(algorithms[layer.name]) and not recompute_applies(layer) and block_of(layer) not in whole:
            where = f"block {block_of(layer)}" if block_of(layer) else "the layers outside every block"
            raise fail(f"{layer.op} keeps nothing of its own for backward, so it has nothing to recompute unless "
                       f"every layer of {where} is recomputed", path, layer=layer.name, field="algorithm",
                       hint="remove 'algorithm' from this layer, or recompute its whole block "
                            "(`dnnplan predict --recompute full --out FILE` writes one)")


def _alternatives(entry: dict, layer: Layer, path: str) -> tuple[tuple[str, float, int], ...]:
    """A convolution's ``alternatives`` as the planner wrote them (informational: a prediction of
    the plan prices its algorithms again)."""
    raw = entry.get("alternatives") or []
    form = "'alternatives' must be a list of {algorithm, compute_s, workspace_bytes}"
    if not isinstance(raw, list) or (raw and layer.op != "conv2d"):
        raise fail(form + " (convolutions only)", path, layer=layer.name, field="alternatives")
    out = []
    for alt in raw:
        if not isinstance(alt, dict) or set(alt) != {"algorithm", "compute_s", "workspace_bytes"} \
                or alt["algorithm"] not in CONV_ALGORITHMS:
            raise fail(form, path, layer=layer.name, field="alternatives")
        out.append((alt["algorithm"], number(alt, "compute_s", path, layer.name),
                    int(number(alt, "workspace_bytes", path, layer.name))))
    return tuple(out)
