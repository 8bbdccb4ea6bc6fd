"""Reading machine YAMLs: the only costmodel module that touches files.

``load_machine("dgx-a100")`` loads a machine shipped in ``costmodel/machine/`` (through
importlib.resources, so it works from a wheel); ``load_machine("path/to/my.yaml")`` loads a user's
file. The YAML is parsed strictly (duplicate keys are an error) and handed to the pure
:func:`costmodel.machine.model.machine_from_dict`; errors come back as :class:`DnnplanError` naming the
file, the line and the key. Fields written ``auto`` (``devices_per_node``, ``device.name``,
``device.peak_tflops``, ``device.memory_gib``) are filled in from the computer running dnnplan,
which is how the shipped ``local`` machine describes this computer's CPU cores.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from costmodel.machine.model import Machine, machine_from_dict
from networks.errors import DnnplanError, did_you_mean
from networks.reading import read_text, refuse_standard_input
from networks.spec_yaml import load_yaml

#: The machine used when none is named. DGX A100 is the most widely deployed multi-node GPU
#: training system today (cloud instances and SuperPODs), its node count is unlimited so
#: ``dnnplan plan resnet50 --devices 64`` (8 nodes) fits, and its figures are published.
DEFAULT_MACHINE = "dgx-a100"

_SUFFIXES = (".yaml", ".yml")


# --- host facts (for `auto`) --------------------------------------------------------------------

@dataclass(frozen=True)
class HostFacts:
    """What ``auto`` resolves to on this computer."""

    cores: int
    cpu_name: str
    flops_per_cycle_float32: int
    clock_hz: float
    memory_bytes: float


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


#: Set by dnnplan in every rank of an MPI job (executor.launch.node): the cores the job's ranks on this
#: node may run on together. A rank bound to one core (Open MPI's default for two ranks, Slurm's
#: task binding) would otherwise see a one-core machine ``local`` and refuse a two-rank plan.
NODE_CORES_ENV = "DNNPLAN_NODE_CORES"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's core count; inside
    an MPI job, the cores its ranks on this node may run on together (:data:`NODE_CORES_ENV`)."""
    shared = os.environ.get(NODE_CORES_ENV, "")
    if shared.isdigit() and int(shared) > 0:
        return int(shared)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def host_facts() -> HostFacts:
    """Probe this computer: usable cores, CPU name, SIMD width, clock, RAM."""
    cpuinfo = _read_text("/proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    if "avx512f" in flags:
        per_cycle = 64          # 2 FMA units x 16 float32 lanes x 2 FLOP
    elif "avx2" in flags and "fma" in flags:
        per_cycle = 32          # 2 FMA units x 8 lanes x 2 FLOP
    elif "avx" in flags or "asimd" in flags:
        per_cycle = 16
    else:
        per_cycle = 8
    max_khz = _read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if max_khz.isdigit():
        clock = int(max_khz) * 1e3
    else:
        try:
            clock = float(fields.get("cpu mhz", "")) * 1e6
        except ValueError:
            clock = 2.5e9       # no clock reported (ARM, macOS): a typical server clock
    memory = 0.0
    for line in _read_text("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            memory = float(line.split()[1]) * 1024
    if memory <= 0:
        try:
            memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            memory = 8 * 2**30
    name = fields.get("model name") or platform.processor() or platform.machine() or "CPU"
    return HostFacts(cores=usable_cores(), cpu_name=name, flops_per_cycle_float32=per_cycle,
                     clock_hz=clock, memory_bytes=memory)


def resolve_auto(data: dict[str, Any], facts: HostFacts) -> dict[str, Any]:
    """A copy of a machine mapping with its ``auto`` fields replaced by ``facts``."""
    out = dict(data)
    if out.get("devices_per_node") == "auto":
        out["devices_per_node"] = facts.cores
    device = out.get("device")
    if isinstance(device, dict):
        device = dict(device)
        if device.get("name") == "auto":
            device["name"] = f"{facts.cpu_name} (one core)"
        if device.get("peak_tflops") == "auto":
            fp32 = facts.flops_per_cycle_float32 * facts.clock_hz / 1e12
            device["peak_tflops"] = {"float32": fp32, "float64": fp32 / 2}
        if device.get("memory_gib") == "auto":
            device["memory_gib"] = facts.memory_bytes / facts.cores / 2**30
        out["device"] = device
    return out


def line_of(text: str, dotted: str | None) -> int | None:
    """1-based line of the deepest key of ``dotted`` (``device.peak_tflops.float32``) in ``text``."""
    if not dotted:
        return None
    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    line = None
    for part in dotted.split("."):
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == part:
                line, node = key_node.start_mark.line + 1, value_node
                break
        else:
            break
    return line


def machine_from_yaml(text: str, source: str) -> Machine:
    """Parse machine YAML ``text`` (``source`` names it in errors), resolving ``auto`` fields."""
    data = load_yaml(text, source)
    if isinstance(data, dict) and _has_auto(data):
        data = resolve_auto(data, host_facts())
    try:
        return machine_from_dict(data, source)
    except DnnplanError as err:
        raise err.located(file=source, line=line_of(text, err.field)) from None


def _has_auto(data: dict[str, Any]) -> bool:
    device = data.get("device")
    values = [data.get("devices_per_node")]
    if isinstance(device, dict):
        values += [device.get(k) for k in ("name", "peak_tflops", "memory_gib")]
    return "auto" in [v for v in values if isinstance(v, str)]


# --- shipped machines and paths -----------------------------------------------------------------

def _shipped_dir():
    return resources.files("costmodel.machine")


def shipped_machine_names() -> list[str]:
    """Names of the machines shipped in ``costmodel/machine/``, sorted."""
    return sorted(entry.name.rsplit(".", 1)[0] for entry in _shipped_dir().iterdir()
                  if entry.name.endswith(_SUFFIXES))


def _looks_like_path(name: str) -> bool:
    return name.endswith(_SUFFIXES) or "/" in name or os.sep in name


def load_machine(name_or_path: str) -> Machine:
    """Load a shipped machine by name (``dgx-h100``) or a machine YAML by path.

    A relative ``profile:`` in the file is resolved against the file's folder.
    """
    refuse_standard_input(name_or_path, "machine")
    if _looks_like_path(name_or_path):
        path = Path(name_or_path)
        text = read_text(path, "machine", missing_hint=f"give a path to a machine YAML or one of "
                                                       f"{', '.join(shipped_machine_names())}")
        machine = machine_from_yaml(text, str(path))
        folder = path.parent
    else:
        names = shipped_machine_names()
        if name_or_path not in names:
            close = did_you_mean(name_or_path, names)
            hint = (f"did you mean '{close}'? " if close else "") + \
                f"shipped machines: {', '.join(names)}; or give a path to a machine YAML"
            raise DnnplanError(f"unknown machine '{name_or_path}'", field="machine", hint=hint)
        resource = _shipped_dir().joinpath(name_or_path + ".yaml")
        machine = machine_from_yaml(resource.read_text(), f"costmodel/machine/{resource.name}")
        folder = None
    if machine.profile and folder is not None and not os.path.isabs(machine.profile):
        machine = dataclasses.replace(machine, profile=str(folder / machine.profile))
    return machine


def list_machines() -> list[Machine]:
    """Every shipped machine, loaded, in name order."""
    return [load_machine(name) for name in shipped_machine_names()]
