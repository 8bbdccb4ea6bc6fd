"""The machine model: devices, nodes, and the two link levels between devices.

A machine is ``nodes`` nodes of ``devices_per_node`` identical devices. Devices inside one **link
domain** talk over the ``intra`` link (NVLink, shared memory); devices in different domains over the
``inter`` link (InfiniBand). A domain is one node unless the machine names a larger one
(``devices_per_nvlink_domain``: a GB200 NVL72 rack joins 18 trays of 4 GPUs in one NVLink domain of
72), always whole nodes. Each link is an alpha-beta-gamma triple as in the collective costs of N. Dryden,
"Parallelism in Training Deep Neural Networks" (lecture slides, "Collectives for deep learning";
docs/collectives.md): ``alpha_s`` seconds per message, ``beta_s_per_byte`` seconds per byte moved,
``gamma_s_per_byte`` seconds per byte reduced.

Ranks are laid out consecutively, ``devices_per_node`` per node (rank r lives on node
``r // devices_per_node``, in domain ``r // domain_size``), which is how ``mpiexec`` fills nodes by
default.

Pure: :func:`machine_from_dict` turns an already-parsed YAML mapping into a frozen :class:`Machine`,
converting the human units in the key names (TFLOP/s, GiB, GB/s, microseconds) into SI units.
Reading files is :mod:`costmodel.machine.loading`' job. The schema is documented in docs/machines.md.
"""

from __future__ import annotations

import difflib
import re
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import numpy as np

from networks.errors import DnnplanError, short

GIB = 2**30
GB = 1e9
TERA = 1e12
US_PER_S = 1e6

#: Data types a device's ``peak_tflops`` may name.
DTYPES = ("float64", "float32", "tf32", "float16", "bfloat16", "float8", "int8")

#: Bytes of memory traffic per byte reduced (read two operands, write one), used to derive gamma
#: from the device's memory bandwidth when a link gives no ``reduce_gb_per_s``.
REDUCE_TRAFFIC_FACTOR = 3.0

DEFAULT_EFFICIENCY = 0.6

#: The roofline's kernel classes, each with its own fraction of the datasheet figure
#: (``device.efficiency`` as a mapping): arithmetic on the CUDA cores (float32 without TF32, and
#: every op that is not GEMM-like), GEMM-like kernels on the tensor cores in TF32 and in 16 bits
#: (FP16, BF16; libraries reach a different fraction of each peak), and the memory traffic of
#: every kernel (what bounds norms, activations, pooling, the optimiser and copies).
EFFICIENCY_CLASSES = ("cuda_cores", "tensor_tf32", "tensor_16bit", "memory")


@dataclass(frozen=True)
class LinkLevel:
    """One level of the network, in the alpha-beta-gamma model (Dryden's collectives slides, above).

    ``alpha_s``: latency per message; ``beta_s_per_byte``: inverse bandwidth per direction per
    device; ``gamma_s_per_byte``: time to reduce (sum) one byte.
    """

    name: str
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float


@dataclass(frozen=True)
class DeviceSpec:
    """One device (GPU or CPU core) from its datasheet, SI units.

    ``efficiency`` derates the roofline ``max(flops / peak, bytes / bandwidth)`` to what kernels
    reach in practice; 0.6 by default (documented in docs/machines.md), to be replaced by a profile.
    ``efficiencies`` gives each of :data:`EFFICIENCY_CLASSES` its own fraction (a machine YAML's
    ``efficiency`` mapping); a class it leaves out takes ``efficiency``.
    """

    name: str
    peak_flops: Mapping[str, float] = field(hash=False)  # a read-only mapping; not hashable
    mem_bandwidth_bytes_per_s: float
    mem_capacity_bytes: float
    efficiency: float = DEFAULT_EFFICIENCY
    efficiencies: Mapping[str, float] = field(default_factory=dict, hash=False)
    #: ``gpu`` or ``cpu`` (a machine file's ``device.kind``): which attention kernel runs by default
    #: (FlashAttention on a GPU; the materialised kernels of the CPU executor)
    kind: str = "cpu"
    #: on-chip shared memory per streaming multiprocessor (``device.sram_kib_per_sm``): the tiles of
    #: a fused attention kernel (costmodel.calls.flash); 0 where the datasheet gives none
    sram_bytes: int = 0
    #: whether FlashAttention runs here (``device.flash_attention``; default: on a GPU): FlashAttention-2
    #: needs Ampere or later, so a V100 runs attention materialised
    flash: bool = False

    def efficiency_of(self, kind: str) -> float:
        """The fraction of peak kernels of ``kind`` (one of :data:`EFFICIENCY_CLASSES`) reach."""
        return self.efficiencies.get(kind, self.efficiency)


@lru_cache(maxsize=8)
def _measured_index(measured: tuple) -> dict:
    return dict(measured)


@dataclass(frozen=True)
class Machine:
    """A machine: ``nodes`` nodes (``None``: as many as asked for) of ``devices_per_node`` devices."""

    name: str
    devices_per_node: int
    nodes: int | None
    device: DeviceSpec
    intra: LinkLevel
    inter: LinkLevel
    profile: str | None = None
    source: str = "<dict>"
    #: Links fitted per collective and message-size regime by ``dnnplan profile-comm``, as
    #: ``(collective name, up to bytes, link)`` in increasing size (the last one's bound is
    #: ``inf``), used for groups inside one node in place of ``intra``; empty for datasheet machines.
    fitted: tuple[tuple[str, float, LinkLevel], ...] = ()
    #: The same, timed after a pass over the last-level cache (profiler.comm.bench ``cold``): for
    #: collectives that follow a layer's kernels (reshards, halos, partial sums, statistics),
    #: where ``fitted`` is for those that follow another collective (the gradient allreduces).
    fitted_cold: tuple[tuple[str, float, LinkLevel], ...] = ()
    #: Collectives timed inside a run (``dnnplan execute --fresh-profile``, profiler.in_step.collectives),
    #: as ``((collective, bytes, group size, state), seconds)``: they price exactly those
    #: collectives inside one node in place of the fits (:meth:`measured_s`); empty otherwise.
    measured: tuple[tuple[tuple[str, int, int, str], float], ...] = ()
    #: Devices joined by the ``intra`` link (a machine file's ``devices_per_nvlink_domain``): a
    #: multiple of ``devices_per_node``; ``None``, one node (:attr:`domain_size`).
    devices_per_domain: int | None = None
    #: The first ranks, modulo :attr:`domain_size`, of the other copies of the ranks priced: a
    #: pipeline's later stages, each the same strategy on its own ranks (``costmodel.comm.spans``
    #: prices a collective on the slowest group of every copy); empty for one copy, rank 0's.
    copies: tuple[int, ...] = ()

    @property
    def domain_size(self) -> int:
        """Devices of one link domain: ranks ``r`` with the same ``r // domain_size`` talk over
        ``intra``, even across nodes (an NVLink domain of several trays)."""
        return self.devices_per_domain or self.devices_per_node

    def measured_s(self, collective: str, nbytes: int, group: int, cold: bool) -> float | None:
        """The in-run time of exactly this collective (``cold``: after a layer's kernels), or None."""
        if not self.measured:
            return None
        return _measured_index(self.measured).get((collective, int(nbytes), int(group), "cold" if cold else "warm"))

    def collective_regimes(self, collective: str, cold: bool = False) -> tuple[tuple[float, LinkLevel], ...]:
        """``(up to bytes, link)`` of each size regime of a collective's fit, smallest first (the
        cold fit when ``cold`` and measured); ``((inf, intra),)`` when it was not measured."""
        for fits in ((self.fitted_cold, self.fitted) if cold else (self.fitted,)):
            regimes = tuple(sorted(((upto, link) for name, upto, link in fits if name == collective),
                                   key=lambda r: r[0]))
            if regimes:
                return regimes
        return ((math.inf, self.intra),)

    def link_for_collective(self, collective: str, nbytes: float = math.inf, cold: bool = False) -> LinkLevel:
        """The intra-node link a collective of ``nbytes`` is costed with: its own fit (of that size
        regime; cold: after a layer's kernels) when measured, else ``intra``."""
        regimes = self.collective_regimes(collective, cold)
        return next((link for upto, link in regimes if nbytes <= upto), regimes[-1][1])

    def same_domain(self, a: int, b: int) -> bool:
        """Whether ranks ``a`` and ``b`` share a link domain (talk over ``intra``)."""
        return a // self.domain_size == b // self.domain_size

    def pairs_same_domain(self, a: int, b: int, n: int = 1) -> bool:
        """Whether every rank ``a + i`` shares a link domain with ``b + i``, ``i < n`` (a pipeline
        stage's ``n`` ranks each sending to its peer of the next stage). The pairs repeat with the
        domain (both ranks move one domain on), so the first ``domain_size`` decide."""
        return all(self.same_domain(a + i, b + i) for i in range(min(max(n, 1), self.domain_size)))

    def max_devices(self) -> int | None:
        """Total devices, or ``None`` when the node count is unlimited."""
        return None if self.nodes is None else self.nodes * self.devices_per_node

    def check_devices(self, p: int) -> None:
        """Raise :class:`DnnplanError` unless ``p`` devices fit on this machine."""
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise DnnplanError(f"device count must be a positive integer, got {short(p)}",
                               field="devices", hint="pass --devices 1 or more")
        if p > MAX_DEVICES:
            raise DnnplanError(f"{short(p)} devices is more than dnnplan plans for (at most 2^20 = {MAX_DEVICES})",
                               field="devices", hint=f"pass --devices {MAX_DEVICES} or fewer")
        most = self.max_devices()
        if most is not None and p > most:
            raise DnnplanError(
                f"{p} devices do not fit on machine '{self.name}' ({self.nodes} node(s) x "
                f"{self.devices_per_node} devices = {most})", field="devices",
                hint=f"ask for at most {most} devices (--devices {most}) or pick a larger --machine")

    def group_span(self, ranks: Sequence[int]) -> tuple[int, int]:
        """``(ranks_per_domain, domains_spanned)`` of a group of global ranks: the two levels of its
        collectives (costmodel.comm.groups), ``intra`` inside a link domain and ``inter`` between.

        Ranks live ``domain_size`` per link domain in rank order (one node unless the machine
        names an NVLink domain of several). ``ranks_per_domain`` is the most ranks of the group in
        any one domain (equal in every domain for the regular groups a grid mapping produces).
        """
        members = np.asarray(ranks, dtype=np.int64)
        if members.size == 0:
            raise ValueError("group_span of an empty group")
        if members.min() < 0:
            raise ValueError(f"negative rank {members.min()}")
        nodes = members // self.domain_size
        if np.any(nodes[1:] < nodes[:-1]):  # a grid's groups come sorted (Strategy.group_array)
            nodes = np.sort(nodes)
        starts = np.flatnonzero(np.diff(nodes, prepend=-1))  # where each node's run of ranks begins
        per_node = np.diff(np.append(starts, nodes.size))
        return int(per_node.max()), int(starts.size)

    def link_for(self, ranks: Sequence[int]) -> LinkLevel:
        """The slowest link level the group crosses: ``intra`` inside one link domain (a node, or
        an NVLink domain of several), else ``inter``."""
        _, nodes = self.group_span(ranks)
        return self.link_spanning(nodes)

    def link_spanning(self, domains: int) -> LinkLevel:
        """The slowest link level of a group spanning ``domains`` link domains (its
        :meth:`group_span`'s second number): ``intra`` for one, else ``inter``."""
        return self.intra if domains == 1 else self.inter


# --- parsing -------------------------------------------------------------------------------------

_TOP_REQUIRED = ("name", "devices_per_node", "device", "intra", "inter")
_TOP_OPTIONAL = ("nodes", "profile", "description", "devices_per_nvlink_domain")
_DEVICE_REQUIRED = ("name", "peak_tflops", "memory_gib", "memory_bandwidth_gb_per_s")
_DEVICE_OPTIONAL = ("efficiency", "kind", "sram_kib_per_sm", "flash_attention")
#: What a device may be (``device.kind``)
DEVICE_KINDS = ("gpu", "cpu")
_LINK_REQUIRED = ("latency_us", "bandwidth_gb_per_s")
_LINK_OPTIONAL = ("name", "reduce_gb_per_s")


def _fail(message: str, source: str, field: str | None, hint: str | None = None) -> DnnplanError:
    return DnnplanError(message, file=source, field=field, hint=hint)


def _check_keys(data: Any, required: tuple[str, ...], optional: tuple[str, ...], where: str,
                source: str) -> Mapping[str, Any]:
    label = where or "the top level"
    if data is None and not where:
        raise _fail("the machine file is empty", source, None, hint="see docs/machines.md for the schema")
    if not isinstance(data, Mapping):
        got = "nothing" if data is None else type(data).__name__
        raise _fail(f"expected a mapping of keys at {label}, got {got}", source,
                    where or None, hint="see docs/machines.md for the schema")
    allowed = required + optional
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
            raise _fail(f"unknown key {short(str(key))} in {label}", source, _join(where, str(key)), hint)
    for key in required:
        if key not in data:
            raise _fail(f"missing key '{key}' in {label}", source, _join(where, key),
                        hint="see docs/machines.md for the schema")
    return data


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


_AUTO_HINT = "'auto' is filled in only when the file is loaded by costmodel.machine.loading.load_machine"


#: What each figure of a machine file may physically be, in the file's units: (least, most, words).
RANGES = {
    "TFLOP/s": (1e-6, 1e6, "1 MFLOP/s to 10^18 FLOP/s per device"),
    "GiB": (1e-3, 1e6, "about 1 MiB to 1 PiB per device"),
    "KiB": (1.0, 1e6, "1 KiB to about 1 GiB per multiprocessor"),
    "GB/s": (1e-3, 1e5, "1 MB/s to 100 TB/s"),
    "microseconds": (1e-3, 1e6, "1 ns to 1 s"),
    "fraction of peak": (1e-3, 1.0, "0.001 to 1"),
}
#: The most devices per node, and nodes, a machine file may give.
MAX_COUNT = 2**24
#: The most devices a plan may span: 2^20, some ten times the largest training clusters built.
MAX_DEVICES = 2**20


def _positive(value: Any, field: str, source: str, unit: str) -> float:
    """A number of ``unit`` within its :data:`RANGES` entry."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = _AUTO_HINT if value == "auto" else f"write a positive number in {unit}"
        if isinstance(value, str) and _reads_as_float(value):
            lo, hi, _ = RANGES[unit]
            number = float(value)
            quoted = re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)", value.strip())  # YAML reads these as numbers unquoted
            hint = (f"write {value.strip()} without quotes" if quoted and lo <= number <= hi else
                    f"YAML reads {short(value)} as text; write it with a decimal point, e.g. {number:.1e}"
                    if lo <= number <= hi else f"YAML reads {short(value)} as text, and as a number it lies outside "
                    f"{lo:g} to {hi:g} {unit}: write the figure in {unit}")
        raise _fail(f"expected a number ({unit}), got {short(value)}", source, field, hint=hint)
    lo, hi, words = RANGES[unit]
    if not lo <= value <= hi:  # also false for nan
        raise _fail(f"{short(value)} {unit} is not a plausible value (it must lie between {lo:g} and {hi:g} "
                    f"{unit}: {words})", source, field, hint=f"write the figure in {unit}")
    return float(value)


def _reads_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _positive_int(value: Any, field: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        hint = _AUTO_HINT if value == "auto" else f"write a whole number from 1 to 2^24 = {MAX_COUNT}"
        raise _fail(f"expected a positive integer up to 2^24, got {short(value)}", source, field, hint=hint)
    return value


def _string(value: Any, field: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(f"expected a non-empty string, got {short(value)}", source, field)
    return value


def _device_from_dict(data: Any, source: str) -> DeviceSpec:
    d = _check_keys(data, _DEVICE_REQUIRED, _DEVICE_OPTIONAL, "device", source)
    peaks_raw = d["peak_tflops"]
    if not isinstance(peaks_raw, Mapping) or not peaks_raw:
        raise _fail("expected a mapping of dtype to TFLOP/s, e.g. {float32: 19.5}", source,
                    "device.peak_tflops")
    peaks: dict[str, float] = {}
    for dtype, tflops in peaks_raw.items():
        if dtype not in DTYPES:
            raise _fail(f"unknown dtype {short(dtype)}", source, f"device.peak_tflops.{dtype}",
                        hint=f"use one of {', '.join(DTYPES)}")
        peaks[dtype] = _positive(tflops, f"device.peak_tflops.{dtype}", source, "TFLOP/s") * TERA
    if "float32" not in peaks:
        raise _fail("missing key 'float32' in device.peak_tflops", source,
                    "device.peak_tflops.float32", hint="every device needs its float32 peak")
    efficiency, efficiencies = _efficiency(d.get("efficiency", DEFAULT_EFFICIENCY), source)
    kind, sram, flash = _kind(d, source)
    return DeviceSpec(
        name=_string(d["name"], "device.name", source),
        peak_flops=MappingProxyType(peaks),
        mem_bandwidth_bytes_per_s=_positive(d["memory_bandwidth_gb_per_s"],
                                            "device.memory_bandwidth_gb_per_s", source, "GB/s") * GB,
        mem_capacity_bytes=_positive(d["memory_gib"], "device.memory_gib", source, "GiB") * GIB,
        efficiency=efficiency,
        efficiencies=MappingProxyType(efficiencies),
        kind=kind,
        sram_bytes=sram,
        flash=flash,
    )


def _kind(d: Mapping[str, Any], source: str) -> tuple[str, int, bool]:
    """``device.kind`` (default ``cpu``), ``device.sram_kib_per_sm`` in bytes and
    ``device.flash_attention`` (default: on a GPU). A GPU needs its shared memory per SM: the tiles
    of its fused attention kernel are sized by it."""
    kind = d.get("kind", "cpu")
    if kind not in DEVICE_KINDS:
        raise _fail(f"unknown device kind {short(kind)}", source, "device.kind", hint="use gpu or cpu")
    flash = d.get("flash_attention", kind == "gpu")
    if not isinstance(flash, bool):
        raise _fail(f"expected true or false, got {short(flash)}", source, "device.flash_attention")
    if flash and kind != "gpu":
        raise _fail("flash attention runs on a gpu device", source, "device.flash_attention",
                    hint="set device.kind: gpu, or remove flash_attention")
    if "sram_kib_per_sm" not in d:
        if kind == "gpu":
            raise _fail("a gpu device needs 'sram_kib_per_sm' (its shared memory per SM, from the datasheet)",
                        source, "device.sram_kib_per_sm",
                        hint="A100: 164, H100: 228, V100: 96 (NVIDIA's tuning guides)")
        return kind, 0, flash
    return kind, int(_positive(d["sram_kib_per_sm"], "device.sram_kib_per_sm", source, "KiB") * 1024), flash


def _efficiency(raw: Any, source: str) -> tuple[float, dict[str, float]]:
    """``device.efficiency``: one fraction for every kernel, or one per :data:`EFFICIENCY_CLASSES`."""
    if not isinstance(raw, Mapping):
        return _positive(raw, "device.efficiency", source, "fraction of peak"), {}
    out = {}
    for kind, value in raw.items():
        if kind not in EFFICIENCY_CLASSES:
            raise _fail(f"unknown kernel class {short(kind)}", source, f"device.efficiency.{kind}",
                        hint=f"use {', '.join(EFFICIENCY_CLASSES)}, or one number for all")
        out[kind] = _positive(value, f"device.efficiency.{kind}", source, "fraction of peak")
    for kind in EFFICIENCY_CLASSES:
        if kind not in out:
            raise _fail(f"missing key {kind!r} in device.efficiency", source, f"device.efficiency.{kind}",
                        hint=f"give all of {', '.join(EFFICIENCY_CLASSES)}, or one number for all")
    return min(out.values()), out


def _link_from_dict(data: Any, level: str, device: DeviceSpec, source: str) -> LinkLevel:
    d = _check_keys(data, _LINK_REQUIRED, _LINK_OPTIONAL, level, source)
    latency = _positive(d["latency_us"], f"{level}.latency_us", source, "microseconds")
    bandwidth = _positive(d["bandwidth_gb_per_s"], f"{level}.bandwidth_gb_per_s", source, "GB/s")
    if "reduce_gb_per_s" in d:
        gamma = 1.0 / (_positive(d["reduce_gb_per_s"], f"{level}.reduce_gb_per_s", source,
                                 "GB/s") * GB)
    else:
        gamma = REDUCE_TRAFFIC_FACTOR / device.mem_bandwidth_bytes_per_s
    name = _string(d.get("name", level), f"{level}.name", source)
    return LinkLevel(name=name, alpha_s=latency / US_PER_S, beta_s_per_byte=1.0 / (bandwidth * GB),
                     gamma_s_per_byte=gamma)


def machine_from_dict(data: Mapping[str, Any], source: str) -> Machine:
    """Build a :class:`Machine` from a parsed machine YAML mapping, strictly.

    Unknown or missing keys, wrong types and non-positive numbers raise :class:`DnnplanError`
    naming ``source`` and the dotted key. Units are converted here: ``peak_tflops`` (TFLOP/s)
    -> FLOP/s, ``memory_gib`` -> bytes, ``*_gb_per_s`` (GB/s = 1e9 bytes/s) -> bytes/s or s/byte,
    ``latency_us`` -> seconds. A link without ``reduce_gb_per_s`` reduces at a third of the
    device's memory bandwidth (read two operands, write one).
    """
    d = _check_keys(data, _TOP_REQUIRED, _TOP_OPTIONAL, "", source)
    name = _string(d["name"], "name", source)
    devices_per_node = _positive_int(d["devices_per_node"], "devices_per_node", source)
    nodes_raw = d.get("nodes")
    nodes = None if nodes_raw is None else _positive_int(nodes_raw, "nodes", source)
    if "description" in d:
        _string(d["description"], "description", source)
    profile = d.get("profile")
    if profile is not None:
        profile = _string(profile, "profile", source)
    domain = _domain(d.get("devices_per_nvlink_domain"), devices_per_node, nodes, source)
    device = _device_from_dict(d["device"], source)
    intra = _link_from_dict(d["intra"], "intra", device, source)
    inter = _link_from_dict(d["inter"], "inter", device, source)
    return Machine(name=name, devices_per_node=devices_per_node, nodes=nodes, device=device,
                   intra=intra, inter=inter, profile=profile, source=source, devices_per_domain=domain)


def _domain(raw: Any, devices_per_node: int, nodes: int | None, source: str) -> int | None:
    """``devices_per_nvlink_domain``: whole nodes joined by the ``intra`` link (absent or null: one
    node), at most the machine's devices."""
    if raw is None:
        return None
    key = "devices_per_nvlink_domain"
    domain = _positive_int(raw, key, source)
    if domain % devices_per_node:
        raise _fail(f"an NVLink domain of {domain} devices is not whole nodes of {devices_per_node}", source, key,
                    hint=f"write a multiple of devices_per_node ({devices_per_node}), e.g. 72 for 18 trays of 4")
    if nodes is not None and domain > nodes * devices_per_node:
        raise _fail(f"an NVLink domain of {domain} devices is larger than the machine's "
                    f"{nodes * devices_per_node}", source, key,
                    hint=f"write at most {nodes * devices_per_node}, or raise nodes")
    return domain
