"""Profile tables: measured kernel times and fitted collective costs of one device.

A table is a frozen :class:`ProfileTable`; on disk it is JSON (docs/profiler.md)::

    {"format": "dnnplan-profile", "version": 1,
     "fingerprint": {"backend": "numpy", "device": "AMD EPYC", "cores": 2, "threads": 1, ...},
     "entries": {"conv2d.fwd|8,3,32,32,...|float32|im2col":
                     {"min_s": ..., "median_s": ..., "spread": ..., "count": ..., "flops": ..., "bytes": ...}},
     "comm": {"ranks": 2, "collectives": {"allreduce": {"alpha_s": ..., "beta_s_per_byte": ...,
              "gamma_s_per_byte": ..., "fit_error": ..., "points": [[nbytes, measured_s, fitted_s], ...]}},
              "link": {"alpha_s": ..., "beta_s_per_byte": ..., "gamma_s_per_byte": ..., "fit_error": ...}}}

Pure: parsing and serialising work on already-decoded mappings; reading and writing files (atomic,
resumable) is :mod:`profiler.tables.store`' job. The compute model that reads a table is
:class:`costmodel.compute.profiled.ProfiledCompute`; its communication fits reach a machine through
:func:`costmodel.compute.profile_links.links_from_table`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from costmodel.calls.kernel_call import SHAPE_FIELDS, split_key
from costmodel.choices.precision import PRECISIONS
from networks.errors import DnnplanError, short

FORMAT = "dnnplan-profile"
VERSION = 1
#: Fingerprint keys that identify a device: tables differing in any of them are foreign to each other.
IDENTITY_KEYS = ("backend", "device", "cores", "threads", "memory_bytes")
#: The executor's time per layer pass in a table's "executor" mapping: entries named
#: ``dispatch/h<k>``, one per half-decade of bytes (executor.probes.dispatch, profiler.probes.dispatch); a table's
#: ``dispatch/b<batch>`` entries (the probe's mean per pass at a batch, before 2026-11-26) are ignored.
DISPATCH = "dispatch"
#: A P-rank step's wait for its slowest rank per second of work: the entry ``wait/p<P>``
#: (executor.probes.wait, profiler.probes.rank_wait).
WAIT = "wait"
#: The executor's own code around one collective of a P-rank step, after a pass over some bytes:
#: entries ``collective/p<P>/<kind>/b<bytes>`` (executor.probes.collective_code, profiler.probes.rank_wait).
COLLECTIVE = "collective"

_ENTRY_KEYS = ("min_s", "median_s", "spread", "count", "flops", "bytes")


@dataclass(frozen=True)
class Entry:
    """Timing of one kernel call: fastest and median of ``count`` repetitions, relative spread
    (interquartile range / median), and the call's FLOPs and bytes."""

    min_s: float
    median_s: float
    spread: float
    count: int
    flops: int
    bytes: int

    @property
    def work(self) -> int:
        return self.flops if self.flops > 0 else max(self.bytes, 1)


@dataclass(frozen=True, eq=False)
class ProfileTable:
    fingerprint: Mapping[str, Any]
    entries: Mapping[str, Entry] = field(default_factory=dict)
    comm: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<table>"
    #: Timings of the executor itself rather than of a kernel, by name: ``dispatch``, its Python
    #: between two layer passes (executor.probes.dispatch); an optional "executor" mapping in the file.
    executor: Mapping[str, Entry] = field(default_factory=dict)
    #: What ran for a kernel entry where a kernel chooses among implementations (a GPU table's
    #: convolutions: the cuDNN engine, its workspace, the family it came from), by entry key; an
    #: optional "records" mapping in the file (kernels.cuda.conv.Choice)
    records: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def short_id(self) -> str:
        """A short, stable hash of the fingerprint's identity (device + threads + backend)."""
        return fingerprint_id(self.fingerprint)

    @property
    def label(self) -> str:
        fp = self.fingerprint
        ranks = f", timed beside {fp['concurrency'] - 1} other rank(s)" if fp.get("concurrency", 1) > 1 else ""
        return f"{fp.get('device', '?')} x{fp.get('threads', '?')}t {fp.get('backend', '?')}{ranks} [{self.short_id}]"


#: The precision a table's kernels were timed in (a GPU table: fp32, tf32, fp16 or bf16; costmodel.choices.precision),
#: fp32 when absent. Part of a table's identity: TF32 and strict float32 time the same float32 calls
#: differently.
DEFAULT_TABLE_PRECISION = "fp32"


def table_precision(fp: Mapping[str, Any]) -> str:
    return str(fp.get("precision") or DEFAULT_TABLE_PRECISION)


def _identity(fp: Mapping[str, Any]) -> dict[str, Any]:
    ident = {k: fp.get(k) for k in IDENTITY_KEYS}
    if table_precision(fp) != DEFAULT_TABLE_PRECISION:  # fp32 tables keep the ids they always had
        ident["precision"] = table_precision(fp)
    return ident


def fingerprint_id(fp: Mapping[str, Any]) -> str:
    ident = json.dumps(_identity(fp), sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:10]


def same_device(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return foreign_reason(a, b) is None


def foreign_reason(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Which identity key differs between two fingerprints (None when they are the same device
    and precision)."""
    for k in IDENTITY_KEYS:
        if a.get(k) != b.get(k):
            return f"{k} {short(a.get(k))} != {short(b.get(k))}"
    if table_precision(a) != table_precision(b):
        return f"precision {table_precision(a)} != {table_precision(b)}"
    return None


# --- parsing and serialising --------------------------------------------------------------------

def _bad(source: str, why: str) -> DnnplanError:
    return DnnplanError(f"profile table is corrupt: {why}", file=source,
                        hint="profile again into a new file: `dnnplan profile NETWORK --out NEW.json`")


def table_from_dict(data: Any, source: str) -> ProfileTable:
    """Validate a decoded JSON table strictly; a corrupt or wrong-format table is a DnnplanError."""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise DnnplanError("not a dnnplan profile table (no \"format\": \"dnnplan-profile\")", file=source,
                           hint="pass a file written by `dnnplan profile`")
    if data.get("version") != VERSION:
        raise DnnplanError(f"profile table version {short(data.get('version'))} is not {VERSION}", file=source,
                           hint="re-run `dnnplan profile` with this dnnplan")
    fp = _fingerprint(data.get("fingerprint"), source)
    entries = _entries(data, "entries", "entry", source, _check_key)
    comm = data.get("comm", {})
    if not isinstance(comm, Mapping):
        raise _bad(source, "comm must be a mapping")
    _check_comm(comm, source)
    executor = _entries(data, "executor", "executor entry", source)
    return ProfileTable(fp, entries, dict(comm), source, executor, _records(data, source))


#: The fields of a record (:attr:`ProfileTable.records`) and their types
RECORD_FIELDS = {"engine": str, "workspace_bytes": int, "ran": str}


def _records(data: Mapping[str, Any], source: str) -> dict[str, dict[str, Any]]:
    raw = data.get("records", {})
    if not isinstance(raw, Mapping):
        raise _bad(source, "records must be a mapping")
    out = {}
    for key, rec in raw.items():
        try:
            _check_key(str(key))
            if not isinstance(rec, Mapping) or any(not isinstance(rec.get(f), t) or isinstance(rec.get(f), bool)
                                                   for f, t in RECORD_FIELDS.items()):
                raise ValueError(f"a record holds {', '.join(RECORD_FIELDS)}")
            if not 0 <= rec["workspace_bytes"] <= 2**50 or len(rec["engine"]) > 200:
                raise ValueError("workspace or engine name out of range")
        except (ValueError, KeyError) as err:
            raise _bad(source, f"record {short(key)}: {err}") from None
        out[str(key)] = {f: rec[f] for f in RECORD_FIELDS}
    return out


def _fingerprint(fp: Any, source: str) -> dict[str, Any]:
    """The table's fingerprint: the identity keys, counts as whole numbers from 1."""
    if not isinstance(fp, Mapping) or not all(k in fp for k in IDENTITY_KEYS):
        raise _bad(source, f"fingerprint must be a mapping with keys {', '.join(IDENTITY_KEYS)}")
    for key in ("threads", "concurrency", "cores", "kernels"):
        value = fp.get(key, 1)
        if value is None and key == "kernels":  # tables from before kernel revisions were counted
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31:
            raise _bad(source, f"fingerprint {key} must be a whole number, got {short(value)}")
    precision = fp.get("precision")
    if precision is not None and (not isinstance(precision, str) or precision not in PRECISIONS):
        raise _bad(source, f"fingerprint precision must be one of {', '.join(PRECISIONS)}, got {short(precision)}")
    return dict(fp)


def _check_key(key: str) -> None:
    """An entry's key names a kernel the cost model knows, with sizes from 0 to 2^48."""
    if key.count("|") != 3:
        raise ValueError("a key is KERNEL|SHAPE|DTYPE|ALGORITHM (four fields, '|' between them), as "
                         "`dnnplan profile` writes it")
    kernel, shape, _, _ = split_key(key)
    if kernel not in SHAPE_FIELDS:
        raise ValueError(f"unknown kernel {short(kernel)}")
    if any(not 0 <= n <= 2**48 for n in shape):
        raise ValueError("a size beyond 2^48")


def _entries(data: Mapping[str, Any], field_: str, what: str, source: str, check_key=None) -> dict[str, Entry]:
    """The mapping ``data[field_]`` of name -> entry, validated (``check_key`` raises on a bad name)."""
    raw = data.get(field_, {})
    if not isinstance(raw, Mapping):
        raise _bad(source, f"{field_} must be a mapping")
    out = {}
    for key, e in raw.items():
        try:
            if check_key is not None:
                check_key(key)
            out[str(key)] = _entry(e)
        except (ValueError, TypeError, KeyError, OverflowError) as err:
            raise _bad(source, f"{what} {short(key)}: {err}") from None
    return out


#: The plausible range of a timed kernel's seconds: a picosecond (far below any kernel) to a day.
SECONDS = (1e-12, 86400.0)


def _entry(e: Any) -> Entry:
    if not isinstance(e, Mapping) or any(k not in e for k in _ENTRY_KEYS):
        raise ValueError("missing fields")
    if any(isinstance(e[k], bool) or not isinstance(e[k], (int, float)) for k in _ENTRY_KEYS):
        raise ValueError("fields must be numbers")
    ent = Entry(float(e["min_s"]), float(e["median_s"]), float(e["spread"]), int(e["count"]),
                int(e["flops"]), int(e["bytes"]))
    lo, hi = SECONDS
    if not (lo <= ent.min_s <= hi and lo <= ent.median_s <= hi and 0 <= ent.spread <= 1e6):
        raise ValueError(f"times must lie between {lo:g} and {hi:g} s")
    if not (1 <= ent.count <= 10**9 and 0 <= ent.flops <= 10**30 and 0 <= ent.bytes <= 10**30):
        raise ValueError("count, flops or bytes out of range")
    return ent


FIT_KEYS = ("alpha_s", "beta_s_per_byte", "gamma_s_per_byte")


def _fits(comm: Mapping[str, Any]) -> dict[str, Any]:
    """Every fit of a table's comm section by name (``link``, each collective, ``cold NAME``)."""
    collectives = comm.get("collectives") or {}
    cold = comm.get("cold") or {}
    if not isinstance(collectives, Mapping) or not isinstance(cold, Mapping) or \
            not isinstance(cold.get("collectives") or {}, Mapping):
        raise ValueError("collectives (and cold.collectives) must map collective names to fits")
    fits = dict(collectives)
    if comm.get("link"):
        fits["link"] = comm["link"]
    fits.update({f"cold {name}": f for name, f in (cold.get("collectives") or {}).items()})
    return fits


def _check_fit(f: Any) -> None:
    """One fit: alpha, beta, gamma (finite, non-negative) and its regimes ``[up_to, a, b, g]``."""
    if not isinstance(f, Mapping):
        raise ValueError("a fit must be a mapping of alpha_s, beta_s_per_byte, gamma_s_per_byte")
    params = [f[k] for k in FIT_KEYS]
    regimes = f.get("regimes") or []
    if not isinstance(regimes, list):
        raise ValueError("regimes must be a list")
    for r in regimes:
        if not isinstance(r, list) or len(r) != 4:
            raise ValueError("a regime is [up_to_bytes, alpha_s, beta_s_per_byte, gamma_s_per_byte]")
        params += r[1:] + ([] if r[0] is None else [r[0]])
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in params):
        raise ValueError("fit parameters must be numbers")
    if not all(0 <= x <= 1e30 for x in params):  # also refuses NaN
        raise ValueError("negative, non-finite or absurd parameter")


def _check_comm(comm: Mapping[str, Any], source: str) -> None:
    try:
        fits = _fits(comm)
    except ValueError as err:
        raise _bad(source, f"comm: {err}") from None
    for name, f in fits.items():
        try:
            _check_fit(f)
        except (ValueError, KeyError) as err:
            raise _bad(source, f"comm fit {short(name)}: {err}") from None


def table_to_dict(table: ProfileTable) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "fingerprint": dict(table.fingerprint),
            "entries": {k: e.__dict__.copy() for k, e in sorted(table.entries.items())},
            "comm": dict(table.comm),
            **({"executor": {k: e.__dict__.copy() for k, e in sorted(table.executor.items())}}
               if table.executor else {}),
            **({"records": {k: dict(r) for k, r in sorted(table.records.items())}} if table.records else {})}


def merge(base: ProfileTable, new: ProfileTable) -> ProfileTable:
    """``base`` with ``new``'s entries and comm fits added (``new`` wins a key both have).

    Tables of different devices never merge: that is a DnnplanError naming the difference.
    """
    why = foreign_reason(base.fingerprint, new.fingerprint)
    if why:
        raise DnnplanError(f"cannot merge profile tables of different devices ({why})", file=new.source,
                           hint="write this device's profile to its own file")
    entries = dict(base.entries)
    entries.update(new.entries)
    comm = dict(base.comm)
    comm.update(new.comm)
    return replace(base, fingerprint={**base.fingerprint, **new.fingerprint}, entries=entries, comm=comm,
                   executor={**base.executor, **new.executor}, records={**base.records, **new.records})


def with_entries(table: ProfileTable, entries: Mapping[str, Entry]) -> ProfileTable:
    return replace(table, entries={**table.entries, **entries})


def wait_key(ranks: int) -> str:
    """The executor entry of a table for ``ranks`` ranks that holds their wait per second of work."""
    return f"{WAIT}/p{ranks}"


def collective_key(ranks: int, kind: str, nbytes: int) -> str:
    """The executor entry of a table for ``ranks`` ranks that holds the code around one collective
    of ``kind`` ("allreduce" or "reshard") after a pass over ``nbytes``."""
    return f"{COLLECTIVE}/p{ranks}/{kind}/b{nbytes}"


def dispatch_key(k: int) -> str:
    """The executor entry of the passes moving 10^(k/2) to 10^((k+1)/2) bytes."""
    return f"{DISPATCH}/h{k}"


def is_dispatch_key(name: str) -> bool:
    """Whether ``name`` is a :func:`dispatch_key` (not an older table's ``dispatch/b<batch>``)."""
    head, _, rest = name.partition("/")
    return head == DISPATCH and rest[:1] == "h" and rest[1:].isdigit()


def with_executor(table: ProfileTable, name: str, entry: Entry) -> ProfileTable:
    return replace(table, executor={**table.executor, name: entry})
