"""Plan files (YAML or JSON): writing, reading and checking them against what they name: the
network, the machine, and each layer's entry (its strategy, algorithm and numbers:
:mod:`planner.plan.layer_entries`), every mistake one DnnplanError naming the file, the layer and
the field."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from costmodel.choices.batch_norm import BATCH_NORMS, DEFAULT_BATCH_NORM
from costmodel.choices.moe_dispatch import DEFAULT_MOE_DISPATCH, MOE_DISPATCHES
from costmodel.choices.optimizer import STATE_SLOTS, ZERO_STAGES, Optimizer
from costmodel.choices.precision import DEFAULT_PRECISION, PRECISIONS
from costmodel.choices.training import TrainingChoices
from costmodel.comm.overlap import BUCKET_MARK, EXPERTS, MODES, resolve_overlap
from costmodel.frameworks.loading import is_framework_path, shipped_framework_names
from costmodel.machine.loading import load_machine
from costmodel.step.pipeline import INTERLEAVED, SCHEDULES, cut_at
from networks.errors import DnnplanError, short
from networks.ir import Network
from networks.loader import load_network
from networks.ops.base import MAX_INT
from networks.reading import read_text
from networks.spec_yaml import DIGITS, load_yaml
from networks.writing import shell_word, write_file
from planner.plan.file_refs import FILE_KEYS, from_plan_folder, in_plan_folder
from planner.plan.layer_entries import check_recomputed, fail, layer_entries, layer_plan, number
from planner.plan.plan import PLAN_VERSION, Baseline, PipelineSpec, Plan

TOP_KEYS = ("version", "network", "seq", "network_name", "network_hash", "batch", "devices", "machine", "precision",
            "optimizer", "zero", "batch_norm", "moe_dispatch", "profile_fingerprint", "step_s", "memory_peak_bytes",
            "memory_parts_bytes", "mfu", "step_breakdown_s", "step_comm_s", "overlap", "baselines", "solver",
            "pipeline", "layers")
TOP_KEYS += tuple(k for k in TrainingChoices.recorded() if k not in TOP_KEYS)  # a choice recorded since
REQUIRED_KEYS = ("network", "batch", "devices", "machine", "layers")


def plan_to_dict(plan: Plan) -> dict:
    choices = plan.choices
    return {
        "version": plan.version, "network": plan.network, **({"seq": choices.seq} if choices.seq is not None else {}),
        "network_name": plan.network_name,
        "network_hash": plan.network_hash, "batch": plan.batch, "devices": plan.devices,
        "machine": plan.machine, **choices.file_entries(),
        "profile_fingerprint": plan.profile_fingerprint,
        "step_s": plan.step_s, "memory_peak_bytes": plan.memory_peak_bytes,
        **({"memory_parts_bytes": dict(plan.memory_parts)} if plan.memory_parts else {}), "mfu": plan.mfu,
        **({"step_breakdown_s": dict(plan.breakdown)} if plan.breakdown else {}),
        **({"step_comm_s": dict(plan.comm), "overlap": choices.overlap} if plan.comm else {}),
        "baselines": [{"name": b.name, "step_s": b.step_s, "memory_peak_bytes": b.memory_peak_bytes,
                       "fits": b.fits} for b in plan.baselines],
        "solver": {k: _whole_bytes(k, v) for k, v in plan.solver.items()},
        **({"pipeline": {"stages": plan.pipeline.stages, "micro_batches": plan.pipeline.micro_batches,
                         "schedule": plan.pipeline.schedule, "first_layers": list(plan.pipeline.first_layers),
                         **({"chunks": plan.pipeline.chunks} if plan.pipeline.chunks > 1 else {})}}
           if plan.pipeline else {}),
        "layers": [{"name": lp.name, "strategy": lp.strategy.as_dict(), "algorithm": lp.algorithm,
                    "fwd_s": lp.fwd_s, "bwd_s": lp.bwd_s, "comm_s": lp.comm_s, "memory_bytes": lp.memory_bytes,
                    **({"alternatives": [{"algorithm": a, "compute_s": s, "workspace_bytes": w}
                                         for a, s, w in lp.alternatives]} if lp.alternatives else {})}
                   for lp in plan.layers],
    }


def write_plan(plan: Plan, path: str, replace: bool = True) -> None:
    """Write atomically (networks.writing: a temporary file in the same folder, synced, then
    renamed; the user's umask); ``.json`` gives JSON, anything else YAML. The folder must exist. A
    network spec or machine file the plan names is written relative to the plan's own folder
    (:func:`from_plan_folder`), so the plan reads back from any working folder."""
    data = plan_to_dict(plan)
    for key in FILE_KEYS:
        data[key] = from_plan_folder(data[key], path)
    text = json.dumps(data, indent=1) if path.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    # a failure of the system: networks.writing.SystemFailure, any old plan intact; not ``replace``:
    # a file another process made there meanwhile is kept (one line)
    write_file(path, text, replace)


def _edited_choice(raw: Network, choices: TrainingChoices, recorded: str) -> tuple[str, str] | None:
    """The choice that marks the network's layers (precision, batch norm, MoE dispatcher, FP8
    parameters: :meth:`TrainingChoices.marked`) and its value the plan was made with, where the network marked
    with it has the hash the plan recorded (the choice edited, not the network); else None."""
    for key, values in (("precision", PRECISIONS), ("batch_norm", BATCH_NORMS), ("moe_dispatch", MOE_DISPATCHES),
                        ("fp8_params", (False, True))):
        for value in values:
            if value != getattr(choices, key) and choices.but(**{key: value}).marked(raw).content_hash() == recorded:
                return key, value
    return None


def plan_from_dict(data, path: str, check: bool = True) -> tuple[Plan, Network]:
    """Parse a plan and check it against the network and machine it names."""
    _check_top(data, path)
    choices = _choices(data, path)
    try:
        raw = load_network(str(data["network"]), choices.seq)
    except DnnplanError as err:
        if choices.seq is not None and _loads(str(data["network"])):  # the plan's seq, not its network
            raise fail(err.bare.replace("--seq", "'seq'", 1), path, field="seq",
                       hint="give the tokens a sequence the network takes, or remove 'seq'") from None
        raise _in_plan(err, path, "network") from None
    net = choices.marked(raw)
    if check and data.get("network_hash") and data["network_hash"] != net.content_hash():
        edited = _edited_choice(raw, choices, data["network_hash"])
        if edited is not None:  # the network is as it was: a choice that marks its layers was edited
            key, was = edited
            now, flag = getattr(choices, key), "--" + key.replace("_", "-")
            if isinstance(was, bool):  # a switch: its flag, and the file's true or false
                raise fail(f"the plan was made {'with' if was else 'without'} {flag}, and its '{key}' now says "
                           f"{str(now).lower()}: it decides the layers' kernels and memory", path, field=key,
                           hint=f"re-plan it {'with' if now else 'without'} {flag}, or set it back to "
                                f"{str(was).lower()}")
            raise fail(f"the plan was made for {key} {was}, and its '{key}' now says {now}: "
                       f"the {key} decides the layers' kernels and memory", path, field=key,
                       hint=f"re-plan it with {flag} {now}, or set it back to {was}")
        raise fail(f"the plan was made for a different version of network {short(data['network'])} "
                    f"(hash {short(data['network_hash'])}, now {net.content_hash()})", path, field="network_hash",
                    hint="re-plan it for the network as it is now")
    _check_machine(data, path)
    pipeline = _pipeline(data, net, path)
    p, batch = data["devices"], data["batch"]
    if pipeline is not None:  # each layer's strategy spans its stage's ranks at one micro-batch
        p, batch = p // pipeline.stages, batch // pipeline.micro_batches
    by_name = layer_entries(data["layers"], net, path, _remake(data, path))
    lps = tuple(layer_plan(layer, by_name[layer.name], p, batch, path) for layer in net.layers)
    check_recomputed(net, lps, path)
    solver = data.get("solver") or {}
    if not isinstance(solver, dict):
        raise fail("'solver' must be a mapping (what `dnnplan plan` wrote)", path, field="solver")
    plan = Plan(network=str(data["network"]), network_name=net.name, network_hash=net.content_hash(),
                batch=data["batch"], devices=data["devices"], machine=str(data["machine"]), layers=lps,
                step_s=number(data, "step_s", path), memory_peak_bytes=int(number(data, "memory_peak_bytes", path)),
                profile_fingerprint=data.get("profile_fingerprint"), baselines=_baselines(data, path),
                solver=dict(solver), choices=choices, mfu=number(data, "mfu", path),
                memory_parts=_memory_parts(data, path), pipeline=pipeline, breakdown=_breakdown(data, path),
                comm=_breakdown(data, path, "step_comm_s"))
    return plan, net


def _choices(data: dict, path: str) -> TrainingChoices:
    """The training choices the plan records (costmodel.choices.training; each one's default when
    absent: plans written before it was recorded), each checked, a mistake naming its field."""
    precision = _named(data, path, "precision", PRECISIONS, DEFAULT_PRECISION)
    optimizer = _optimizer(data, path)
    named = {"precision": precision, "optimizer": optimizer.name, "zero": optimizer.zero, "seq": _seq(data, path),
             "overlap": str(data.get("overlap") or ""),
             "batch_norm": _named(data, path, "batch_norm", BATCH_NORMS, DEFAULT_BATCH_NORM),
             "moe_dispatch": _named(data, path, "moe_dispatch", MOE_DISPATCHES, DEFAULT_MOE_DISPATCH)}
    _check_overlap(named["overlap"], path)
    for key in TrainingChoices.recorded():  # a choice recorded since, by its own check
        if key not in named and key in data:
            try:
                named[key] = getattr(TrainingChoices(**{key: data[key]}), key)
            except DnnplanError as err:
                raise fail(err.bare, path, field=key, hint=err.hint) from None
    framework = named.get("framework")
    if isinstance(framework, str) and not is_framework_path(framework) \
            and framework not in shipped_framework_names():
        raise fail(f"unknown framework {short(framework)}", path, field="framework",
                   hint=f"shipped frameworks: {', '.join(shipped_framework_names())}; or a path to a framework YAML")
    return TrainingChoices(**named)


def _check_overlap(overlap: str, path: str) -> None:
    """The plan's ``overlap`` mode as ``--overlap`` takes it (costmodel.comm.overlap), a mistake naming the field."""
    if not overlap:
        return
    try:
        resolve_overlap(overlap, None)
    except DnnplanError:
        raise fail(f"unknown overlap {short(overlap)}", path, field="overlap",
                   hint=f"write one of {', '.join(MODES)}, optionally with {EXPERTS} and {BUCKET_MARK}MiB for the "
                        f"gradient bucket (data{BUCKET_MARK}25)") from None


def _loads(network: str) -> bool:
    """Whether ``network`` loads at its own sequence."""
    try:
        load_network(network)
    except DnnplanError:
        return False
    return True


def _seq(data: dict, path: str) -> int | None:
    """The plan's ``seq`` (the network's tokens per sequence it was planned for), None when absent."""
    seq = data.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_INT):
        raise fail(f"'seq' must be a whole number from 1 to 2^31 (the tokens per sequence), got {short(seq)}", path,
                    field="seq")
    return seq


def _pipeline(data: dict, net: Network, path: str) -> PipelineSpec | None:
    """The plan's ``pipeline`` (None when absent): stages dividing its devices, micro-batches
    dividing its batch, a schedule, and each stage's first layer in network order; interleaved,
    ``chunks`` model chunks a device and each chunk's first layer."""
    raw = data.get("pipeline")
    if raw is None:
        return None
    keys = ("stages", "micro_batches", "schedule", "first_layers")
    if not isinstance(raw, dict) or not set(keys) <= set(raw) <= set(keys) | {"chunks"}:
        raise fail("'pipeline' must be a mapping of " + ", ".join(keys) + " (and chunks, interleaved)", path,
                    field="pipeline")
    stages, micro, schedule, firsts = (raw[k] for k in keys)
    for key, value, whole in (("stages", stages, data["devices"]), ("micro_batches", micro, data["batch"])):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or whole % value:
            what = "devices" if key == "stages" else "batch"
            raise fail(f"pipeline '{key}' must be a whole number dividing the plan's {what} ({whole}), got "
                        f"{short(value)}", path, field="pipeline")
    chunks = _chunks(raw, schedule, stages, micro, path)
    if not isinstance(firsts, list) or len(firsts) != stages * chunks or not all(isinstance(f, str) for f in firsts):
        what = f"each of the {stages} stages" if chunks == 1 else f"each of the {stages} x {chunks} chunks"
        raise fail(f"pipeline 'first_layers' must list the first layer of {what}", path, field="pipeline")
    try:
        cut_at(net, tuple(firsts))
    except DnnplanError as err:
        raise fail(err.bare, path, field="pipeline", hint=err.hint) from None
    return PipelineSpec(stages, micro, schedule, tuple(firsts), chunks)


def _chunks(raw: dict, schedule, stages, micro, path: str) -> int:
    """The pipeline's model chunks a device: 1, or 2 and more under the interleaved schedule, whose
    micro-batches come in groups of the stages (costmodel.step.pipeline)."""
    if schedule not in SCHEDULES + (INTERLEAVED,):
        raise fail(f"unknown pipeline schedule {short(schedule)}", path, field="pipeline",
                    hint=f"use one of {', '.join(SCHEDULES + (INTERLEAVED,))}")
    chunks = raw.get("chunks", 1)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or (chunks > 1) != (schedule == INTERLEAVED) \
            or chunks < 1:
        raise fail(f"pipeline 'chunks' {short(chunks)} with the {short(schedule)} schedule", path, field="pipeline",
                    hint="the interleaved schedule holds 2 or more chunks a device; 1f1b and gpipe hold 1")
    if chunks > 1 and micro % stages:
        raise fail(f"the interleaved schedule runs micro-batches in groups of the {stages} stages; {micro} is not "
                    "a multiple", path, field="pipeline")
    return chunks


def _memory_parts(data: dict, path: str) -> dict[str, int]:
    """The plan's ``memory_parts_bytes`` (what holds its peak; shown, never used to predict)."""
    raw = data.get("memory_parts_bytes") or {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise fail("'memory_parts_bytes' must map what holds memory to bytes", path, field="memory_parts_bytes")
    return {k: int(number(raw, k, path)) for k in raw}


def _breakdown(data: dict, path: str, key: str = "step_breakdown_s") -> tuple[tuple[str, float], ...]:
    """The plan's ``step_breakdown_s`` (its step by term, costmodel.step.breakdown; shown, never used to
    predict), or with ``key`` ``step_comm_s``, its collectives' time exposed and overlapped."""
    raw = data.get(key) or {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise fail(f"'{key}' must map a step's terms to seconds", path, field=key)
    return tuple((k, number(raw, k, path)) for k in raw)


def _optimizer(data: dict, path: str) -> Optimizer:
    """The plan's ``optimizer`` and ``zero`` (momentum and 0 when absent: older plans)."""
    name, zero = data.get("optimizer", "momentum"), data.get("zero", 0)
    if not isinstance(name, str) or name not in STATE_SLOTS:
        raise fail(f"unknown optimizer {short(name)}", path, field="optimizer",
                    hint=f"use one of {', '.join(STATE_SLOTS)}")
    if isinstance(zero, bool) or zero not in ZERO_STAGES:
        raise fail(f"'zero' must be a ZeRO stage 0 to 3, got {short(zero)}", path, field="zero")
    return Optimizer(name, zero)


def _named(data: dict, path: str, key: str, choices, default: str) -> str:
    """The plan's ``key``, one of ``choices`` (``default`` when absent: plans written before it was
    recorded): its ``precision`` (fp32), its ``batch_norm`` (sync), its ``moe_dispatch`` (alltoall)."""
    value = data.get(key, default)
    if not isinstance(value, str) or value not in choices:
        raise fail(f"unknown {key} {short(value)}", path, field=key, hint=f"use one of {', '.join(choices)}")
    return value


def _baselines(data: dict, path: str) -> tuple[Baseline, ...]:
    """The plan's baselines: a list of {name, step_s, memory_peak_bytes}."""
    raw = data.get("baselines") or []
    if not isinstance(raw, list) or not all(isinstance(b, dict) and isinstance(b.get("name"), str) for b in raw):
        raise fail("'baselines' must be a list of {name, step_s, memory_peak_bytes}", path, field="baselines")
    if not all(isinstance(b.get("fits", True), bool) for b in raw):
        raise fail("a baseline's 'fits' must be true or false", path, field="baselines")
    return tuple(Baseline(b["name"], number(b, "step_s", path), int(number(b, "memory_peak_bytes", path)),
                          b.get("fits", True)) for b in raw)


def _in_plan(err: DnnplanError, path: str, field: str) -> DnnplanError:
    """``err`` of loading what the plan's ``field`` names, located in the plan where it names no
    file of its own (an unknown zoo network or machine; a spec's or machine file's own mistake
    keeps its file)."""
    return err if err.file is not None else err.located(file=path, field=field)


def _check_machine(data: dict, path: str) -> None:
    """The machine the plan names must exist and hold the plan's devices."""
    try:
        machine = load_machine(str(data["machine"]))
    except DnnplanError as err:
        raise _in_plan(err, path, "machine") from None
    p, most = data["devices"], machine.max_devices()
    if most is not None and p > most:
        raise fail(f"the plan is for {p} devices, but machine '{machine.name}' has {most}", path, field="machine",
                    hint=f"plan again for it with `{_remake({**data, 'devices': most}, path, machine.name)}`, "
                         f"or name a machine with {p} devices or more in the plan's 'machine'")
    try:
        machine.check_devices(p)
    except DnnplanError as err:  # more devices than dnnplan plans for: the plan's field, not a flag
        raise fail(err.bare, path, field="devices", hint="plan again with fewer --devices") from None


def _check_top(data, path: str) -> None:
    """The plan's top level: a mapping of known keys, with the required ones, of this version."""
    if not isinstance(data, dict):
        raise fail("a plan must be a mapping (made by `dnnplan plan --out`)", path)
    if "network_hash" not in data and "compute_model" in data:  # what `predict --json` prints, kept in a file
        raise fail("is the JSON `dnnplan predict --json` prints, not a plan file", path,
                   hint="write a plan with `dnnplan plan ... --out FILE` or `dnnplan predict ... --out FILE`")
    for key in data:
        if key not in TOP_KEYS:
            raise fail(f"unknown key '{key}'", path, field=key)
    for key in REQUIRED_KEYS:
        if key not in data:
            raise fail(f"the plan has no '{key}'", path, field=key)
    if data.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise fail(f"plan format version {data.get('version')} is not {PLAN_VERSION}", path, field="version",
                    hint="re-create it with this dnnplan's `dnnplan plan`")
    for key in ("network", "machine"):
        if not isinstance(data[key], str) or not 0 < len(data[key]) <= 4096:
            raise fail(f"'{key}' must name a {key} (a zoo name or a path), got {short(data[key])}", path, field=key)
    for key in ("batch", "devices"):
        if not isinstance(data[key], int) or isinstance(data[key], bool) or not 1 <= data[key] <= MAX_INT:
            raise fail(f"'{key}' must be a whole number from 1 to 2^31, got {short(data[key])}", path, field=key)


def read_plan(path: str, check: bool = True) -> tuple[Plan, Network]:
    """Read, parse and check a plan file; every mistake in it is one DnnplanError naming the file."""
    text = read_text(path, "plan", missing_hint=f"make one with `{_remake(None, path)}`")
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            if not text[err.pos:].strip() or _on_an_unfinished_last_line(text, err.lineno):
                raise _cut_short(text, None, path) from None
            raise DnnplanError(f"not valid JSON: {err.msg}", file=path, line=err.lineno) from None
        except (RecursionError, ValueError) as err:  # deep nesting; a number past Python's 4,300-digit limit
            why = "it nests too deeply" if isinstance(err, RecursionError) else DIGITS
            raise DnnplanError(f"not valid JSON: {why}", file=path) from None
    else:
        try:
            data = load_yaml(text, path)
        except DnnplanError as err:
            if err.line is not None and _on_an_unfinished_last_line(text, err.line):
                raise _cut_short(text, _complete_lines(text, path), path) from None
            raise
    if isinstance(data, dict) and "inputs" in data and "devices" not in data:
        raise DnnplanError("this is a network spec, not a plan", file=path,
                           hint=f"make a plan of it with `dnnplan plan {shell_word(path)} --devices P --out plan.yaml`")
    if isinstance(data, dict) and data.get("format") == "dnnplan-profile":
        raise DnnplanError("this is a profile table (dnnplan profile's), not a plan", file=path,
                           hint=f"give it as --profile {shell_word(path)} to dnnplan plan or predict")
    if isinstance(data, dict) and _keys_missing_at_end(data):
        raise _cut_short(text, data, path)
    if isinstance(data, dict):
        data = {**data, **{key: in_plan_folder(data[key], path) for key in FILE_KEYS
                           if isinstance(data.get(key), str)}}
    return plan_from_dict(data, path, check)


def _on_an_unfinished_last_line(text: str, line: int) -> bool:
    """Whether a parse error at ``line`` (1-based) lies on the file's last line and that line has no
    line break: where a file cut short mid-line fails (a plan is written with a final newline)."""
    return bool(text) and not text.endswith("\n") and line >= text.count("\n") + 1


def _complete_lines(text: str, path: str) -> dict | None:
    """What the complete lines of a YAML plan cut short say (to name its network and devices), or None."""
    try:
        data = load_yaml(text[:text.rfind("\n") + 1], path)
    except DnnplanError:
        return None
    return data if isinstance(data, dict) else None


def _keys_missing_at_end(data: dict) -> bool:
    """Whether the plan lacks keys it needs, all of them after the last key it has (in the order a
    plan is written): the mark of a file cut short."""
    present = [TOP_KEYS.index(k) for k in data if k in TOP_KEYS]
    missing = [TOP_KEYS.index(k) for k in REQUIRED_KEYS if k not in data]
    return bool(present and missing) and min(missing) > max(present)


def _remake(data: dict | None, path: str, machine: str | None = None) -> str:
    """The command that makes this plan again (from what the plan says of itself, its network from
    the working folder), on ``machine`` when one is named; ``--force`` where the file is there."""
    data = data or {}
    net, p, b = data.get("network"), data.get("devices"), data.get("batch")
    network = short(in_plan_folder(net, path), 40).strip("'") if isinstance(net, str) else "NETWORK"
    devices = p if isinstance(p, int) and not isinstance(p, bool) else "P"
    batch = f" --batch {b}" if isinstance(b, int) and not isinstance(b, bool) else ""
    named = machine or data.get("machine")
    on = f" --machine {short(in_plan_folder(named, path), 40).strip(chr(39))}" if isinstance(named, str) else ""
    force = " --force" if os.path.exists(path) else ""
    return f"dnnplan plan {network} --devices {devices}{batch}{on} --out {path}{force}"


def _cut_short(text: str, data: dict | None, path: str) -> DnnplanError:
    """The error for a plan file that ends early: its last complete line, the keys it lacks (where
    it parsed), and how to make it again."""
    last = text.count("\n") if text.count("\n") else 1
    lacks = [k for k in REQUIRED_KEYS if k not in data] if isinstance(data, dict) else []
    what = f"; it has no {', '.join(repr(k) for k in lacks)}" if lacks else ""
    return DnnplanError(f"the plan ends early (was it cut short?){what}; its last complete line is {last}",
                        file=path, line=last, hint=f"make it again with `{_remake(data, path)}`")


def is_plan_file(arg: str) -> bool:
    """Whether a command argument names a plan file (not a network spec), whatever its name ends in
    (`plan --out` writes YAML under any name but .json: `plan -o p.txt` is read back as a plan)."""
    p = Path(arg)
    if not p.is_file() or p.suffix.lower() == ".onnx":
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(4000).decode("utf-8", errors="replace")
    except OSError:
        return False
    return "network_hash" in head or ("devices" in head and "strategy" in head and "layers" in head)


def _whole_bytes(key: str, value):
    """A solver entry as written: a count of bytes held as a whole float (a memory limit) as an
    integer, every other value as it is."""
    return int(value) if key.endswith("_bytes") and isinstance(value, float) and value.is_integer() else value
