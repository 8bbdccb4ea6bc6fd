"""Plan files (YAML or JSON): writing, reading and checking them against what they name."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from costmodel.compute import DEFAULT_CONV_ALGORITHM, algorithm_applies
from costmodel.files import load_machine
from costmodel.layer_layouts import check_fits
from costmodel.strategy import make_strategy
from networks.errors import DnnplanError
from networks.ir import Layer, Network
from networks.loader import load_network
from planner.plan import PLAN_VERSION, Baseline, LayerPlan, Plan

TOP_KEYS = ("version", "network", "network_name", "network_hash", "batch", "devices", "machine",
            "profile_fingerprint", "step_s", "memory_peak_bytes", "baselines", "solver", "layers")
LAYER_KEYS = ("name", "strategy", "algorithm", "fwd_s", "bwd_s", "comm_s", "memory_bytes")


def plan_to_dict(plan: Plan) -> dict:
    return {
        "version": plan.version, "network": plan.network, "network_name": plan.network_name,
        "network_hash": plan.network_hash, "batch": plan.batch, "devices": plan.devices,
        "machine": plan.machine, "profile_fingerprint": plan.profile_fingerprint,
        "step_s": plan.step_s, "memory_peak_bytes": plan.memory_peak_bytes,
        "baselines": [{"name": b.name, "step_s": b.step_s, "memory_peak_bytes": b.memory_peak_bytes}
                      for b in plan.baselines],
        "solver": dict(plan.solver),
        "layers": [{"name": lp.name, "strategy": lp.strategy.as_dict(), "algorithm": lp.algorithm,
                    "fwd_s": lp.fwd_s, "bwd_s": lp.bwd_s, "comm_s": lp.comm_s, "memory_bytes": lp.memory_bytes}
                   for lp in plan.layers],
    }


def write_plan(plan: Plan, path: str) -> None:
    """Write atomically; ``.json`` gives JSON, anything else YAML."""
    data = plan_to_dict(plan)
    text = json.dumps(data, indent=1) if path.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=str(target.parent), prefix=".plan-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as err:
        raise DnnplanError(f"cannot write the plan: {err}", file=path) from None


def _fail(msg: str, path: str, layer: str | None = None, field: str | None = None, hint: str | None = None):
    return DnnplanError(msg, file=path, layer=layer, field=field, hint=hint)


def plan_from_dict(data, path: str, check: bool = True) -> tuple[Plan, Network]:
    """Parse a plan and check it against the network and machine it names."""
    _check_top(data, path)
    net = load_network(str(data["network"]))
    if check and data.get("network_hash") and data["network_hash"] != net.content_hash():
        raise _fail(f"the plan was made for a different version of network '{data['network']}' "
                    f"(hash {data['network_hash']}, now {net.content_hash()})", path, field="network_hash",
                    hint="re-plan it for the network as it is now")
    machine = load_machine(str(data["machine"]))
    machine.check_devices(data["devices"])
    p, batch = data["devices"], data["batch"]
    by_name = _layer_entries(data["layers"], net, path)
    lps = tuple(_layer_plan(layer, by_name[layer.name], p, batch, path) for layer in net.layers)
    baselines = tuple(Baseline(str(b["name"]), float(b["step_s"]), int(b.get("memory_peak_bytes", 0)))
                      for b in data.get("baselines") or [])
    plan = Plan(network=str(data["network"]), network_name=net.name, network_hash=net.content_hash(),
                batch=batch, devices=p, machine=str(data["machine"]), layers=lps,
                step_s=float(data.get("step_s", 0.0)), memory_peak_bytes=int(data.get("memory_peak_bytes", 0)),
                profile_fingerprint=data.get("profile_fingerprint"), baselines=baselines,
                solver=dict(data.get("solver") or {}))
    return plan, net


def _check_top(data, path: str) -> None:
    """The plan's top level: a mapping of known keys, with the required ones, of this version."""
    if not isinstance(data, dict):
        raise _fail("a plan must be a mapping (made by `dnnplan plan --out`)", path)
    for key in data:
        if key not in TOP_KEYS:
            raise _fail(f"unknown key '{key}'", path, field=key)
    for key in ("network", "batch", "devices", "machine", "layers"):
        if key not in data:
            raise _fail(f"the plan has no '{key}'", path, field=key)
    if data.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise _fail(f"plan format version {data.get('version')} is not {PLAN_VERSION}", path, field="version",
                    hint="re-create it with this dnnplan's `dnnplan plan`")
    for key in ("batch", "devices"):
        if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 1:
            raise _fail(f"'{key}' must be a positive integer", path, field=key)


def _layer_entries(layers_raw, net: Network, path: str) -> dict:
    """The plan's layer entries by name, exactly one for each layer of ``net``."""
    if not isinstance(layers_raw, list):
        raise _fail("'layers' must be a list", path, field="layers")
    by_name = {}
    for entry in layers_raw:
        if not isinstance(entry, dict) or "name" not in entry:
            raise _fail("each layer entry needs a 'name'", path, field="layers")
        name = entry["name"]
        for key in entry:
            if key not in LAYER_KEYS:
                raise _fail(f"unknown key '{key}'", path, layer=str(name), field=key)
        by_name[name] = entry
    names = [l.name for l in net.layers]
    missing = [n for n in names if n not in by_name]
    extra = [n for n in by_name if n not in names]
    if missing or extra:
        what = f"has no entry for layer '{missing[0]}'" if missing else f"names layer '{extra[0]}' the network lacks"
        raise _fail(f"the plan {what}", path, layer=(missing or extra)[0], field="layers",
                    hint="re-plan it for this network")
    return by_name


def _layer_plan(layer: Layer, entry: dict, p: int, batch: int, path: str) -> LayerPlan:
    """One layer's entry, its strategy and algorithm checked against the layer."""
    degrees = entry.get("strategy") or {}
    if not isinstance(degrees, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in degrees.values()):
        raise _fail("'strategy' must map dimensions to integer degrees, e.g. {N: 4, F: 2}", path,
                    layer=layer.name, field="strategy")
    try:
        strat = make_strategy(p, {str(k): v for k, v in degrees.items()})
    except DnnplanError as err:
        raise _fail(err.bare, path, layer=layer.name, field="strategy", hint=err.hint) from None
    why = check_fits(layer, strat, batch)
    if why:
        raise _fail(f"strategy {strat.label} does not fit: {why}", path, layer=layer.name, field="strategy")
    algo = entry.get("algorithm") or ""
    if layer.op == "conv2d":
        algo = algo or DEFAULT_CONV_ALGORITHM
        if not algorithm_applies(layer, algo):
            raise _fail(f"convolution algorithm '{algo}' cannot run this layer", path, layer=layer.name,
                        field="algorithm", hint="direct and im2col run every convolution")
    elif algo:
        raise _fail(f"only conv2d layers take an algorithm, not {layer.op}", path, layer=layer.name,
                    field="algorithm")
    return LayerPlan(layer.name, strat, algo, float(entry.get("fwd_s", 0.0)), float(entry.get("bwd_s", 0.0)),
                     float(entry.get("comm_s", 0.0)), int(entry.get("memory_bytes", 0)))


def read_plan(path: str, check: bool = True) -> tuple[Plan, Network]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DnnplanError(f"cannot read the plan: {err}", file=path) from None
    try:
        data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise DnnplanError(f"not a valid plan file: {str(err).splitlines()[0]}", file=path) from None
    return plan_from_dict(data, path, check)


def is_plan_file(arg: str) -> bool:
    """Whether a command argument names a plan file (not a network spec)."""
    p = Path(arg)
    if not p.is_file() or p.suffix not in (".yaml", ".yml", ".json"):
        return False
    try:
        head = p.read_text(encoding="utf-8")[:4000]
    except (OSError, UnicodeDecodeError):
        return False
    return "network_hash" in head or ("devices" in head and "strategy" in head and "layers" in head)
