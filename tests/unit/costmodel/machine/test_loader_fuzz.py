"""Property tests: a mutated machine file, profile table or plan file loads, or fails with one short DnnplanError.

Good inputs (the shipped machines; a real table of lenet5's calls, two timed here, with dispatch entries and comm
fits; ``dnnplan plan lenet5 --devices 4`` in YAML and JSON) are mutated as trees (keys deleted or renamed, values of
other types, huge, negative, zero, NaN, infinite, 10**400, nested lists, long strings, list items cut, duplicated or
reordered, and the fields each loader reads) or as text (truncated, tabs and characters inserted, tricky YAML/JSON
literals, bytes flipped so it is not UTF-8) and loaded: machine_from_yaml / load_machine, read_table and then the
table used as the planner uses it, read_plan. Anything but a result or a DnnplanError of at most 6 lines and 600
characters, within 20 s, is a loader bug. ``DNNPLAN_FUZZ_EXAMPLES`` raises the examples and turns on shrinking.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import operator
import os
import re
import time
from dataclasses import replace

import pytest
import yaml
from hypothesis import given, HealthCheck, Phase, settings, strategies as st
from typer.testing import CliRunner

from costmodel.comm.groups import collective_s
from costmodel.calls.layer_calls import kernel_calls, PASSES
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine, machine_from_yaml
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import check_fits, local_layer
from costmodel.machine.model import Machine
from costmodel.compute.profile_links import links_from_table
from costmodel.compute.profile_table import Entry, with_entries
from costmodel.compute.profiled import ProfiledCompute
from costmodel.parallel.strategy import Strategy
from dnnplan.cli import app
from networks.errors import LINE_CHARS, DnnplanError
from networks.loader import load_network
from planner.plan.plan import Plan
from planner.plan.plan_file import read_plan
from profiler.tables.fingerprint import fingerprint
from profiler.timing.harness import QUICK
from profiler.run import profile_calls
from profiler.tables.store import open_for_device, read_table, write_table

from tests.support.paths import ROOT
from tests.support.profile_calls import _two_calls

EXAMPLES = int(os.environ.get("DNNPLAN_FUZZ_EXAMPLES", "0"))
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None,
                max_examples=EXAMPLES or 400, phases=list(Phase) if EXAMPLES else [Phase.generate])
MANY = settings(FUZZ, max_examples=EXAMPLES * 2 or 1000)  # machines are cheap to load
LIMIT_S, MAX_LINES, MAX_CHARS = 20.0, 6, LINE_CHARS  # an error line's own cap (networks.errors)
MACHINES_DIR = ROOT / "costmodel" / "machine"
MACHINE_TEXTS = {p.stem: p.read_text(encoding="utf-8") for p in sorted(MACHINES_DIR.glob("*.yaml"))}
MACHINE_TREES = {name: yaml.safe_load(text) for name, text in MACHINE_TEXTS.items()}
LOCAL, LENET = load_machine("local"), load_network("lenet5")
HUGE, LONG, MANY_LINES = 10 ** 400, "k" * 3000, "\n".join(["line"] * 12)
SCALARS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([0, -1, -0.0, 5e-324, 1e-320, 1e300, 1.7e308, 2 ** 63, 2 ** 1024, HUGE, -HUGE, 3.5, math.inf,
                     -math.inf, math.nan, True, False, None, "", " ", "auto", "nan", "1e400", "0x10", LONG,
                     MANY_LINES, list(range(400)), [[[[[1]]]]], {"a": {"b": [1, {"c": None}]}}]),
    st.floats(), st.text(max_size=8),
    st.recursive(st.one_of(st.integers(-2, 5), st.text(max_size=3), st.none()),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
                 max_leaves=6))
#: Literals that stress the parsers (PyYAML's constructors build dates, ints, floats, sets from them).
YAML_SNIPPETS = ["2024-13-45", "2001-02-30 10:00:00", "!!int x", "!!float .", "!!int _", "!!bool x",
                 "!!timestamp 1", "!!binary ~", "!!set {a}", "!!omap [a]", "!!python/tuple [1]", "*nope",
                 "&a [*a]", "{[1, 2]: 3}", "{{a: 1}: 2}", "\n  ? [a, b]\n  : 1", "1_000", "0o17", "0b101", "1:20",
                 ".nan", "-.inf", "1e400", "9" * 5000, "1" + "0" * 400, "[" * 3000, "'open", '"\\x"', "|", "~",
                 "\x00", "\x07", "\x85", "\ufeff", "\ud800", "<<: 1"]
JSON_SNIPPETS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5000, "1" + "0" * 400, "[" * 3000,
                 "[" * 3000 + "]" * 3000, '"\\ud800"', '"\\u0000"', "null", "true", '"x"', "[]", "{}",
                 '{"a": 1}', '"' + "x" * 2000 + '"', "-0", "1.5", "0", "-1", "1E+5", "01", "'x'", "\x00"]
VALUE = re.compile(r"(?<=: )[^,\n{}\[\]]+")
ANY, RENAME = object(), object()


def show(data) -> str:
    return f"{text[:1800]} ... ({len(text)} chars) ... {text[-500:]}" if len(text := repr(data)) > 2500 else text


def outcome(call, shown):
    """``call()``'s result, or None when it raised a short DnnplanError; fails on anything else."""
    start = time.monotonic()
    try:
        result = call()
    except DnnplanError as err:
        result, msg = None, str(err)
        lines = len(re.split(r"\r\n?|\n", msg))  # what a terminal shows as lines
        assert len(msg) <= MAX_CHARS and lines <= MAX_LINES, \
            f"DnnplanError of {len(msg)} chars, {lines} lines: {msg[:400]!r}...\ninput: {show(shown)}"
    except Exception as err:  # noqa: BLE001 - the property under test
        raise AssertionError(f"{type(err).__name__} escaped (not a DnnplanError): {str(err)[:300]}\n"
                             f"input: {show(shown)}") from err
    elapsed = time.monotonic() - start
    assert elapsed < LIMIT_S, f"took {elapsed:.1f} s\ninput: {show(shown)}"
    return result


def nodes(tree, path=()):
    """Every (path, value) below the root."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        yield path + (k,), v
        yield from nodes(v, path + (k,))


def at(tree, path):
    return functools.reduce(operator.getitem, path, tree)


def mutate(draw, tree):
    """One generic mutation of a decoded YAML/JSON tree (in place where possible)."""
    everything = list(nodes(tree))
    keys = sorted({k for path, _ in everything for k in path if isinstance(k, str)})
    if not everything:
        return draw(SCALARS.map(copy.deepcopy))
    kind = draw(st.sampled_from(["delete", "replace", "rename", "number", "list", "wrap"]))
    numbers = [p for p, v in everything if isinstance(v, (int, float)) and not isinstance(v, bool)]
    lists = [p for p, v in everything if isinstance(v, list) and v] + ([()] if isinstance(tree, list) else [])
    if kind == "number" and numbers:
        path = draw(st.sampled_from(numbers))
        old = at(tree, path)
        big = isinstance(old, int) and abs(old) > 1e300  # times a float would overflow
        at(tree, path[:-1])[path[-1]] = draw(st.sampled_from([old + 1, old - 1, 0, -old, str(old), HUGE, math.nan]
                                                             + ([] if big else [old * 1000, old + 0.5, old * 1e300])))
    elif kind == "list" and lists:
        seq = at(tree, draw(st.sampled_from(lists)))
        i, j = draw(st.integers(0, len(seq) - 1)), draw(st.integers(0, len(seq) - 1))  # cut, reverse, duplicate, swap:
        seq[:] = draw(st.sampled_from([seq[:i], seq[::-1], seq[:j] + [copy.deepcopy(seq[i])] + seq[j:],
                                       [seq[j] if k == i else seq[i] if k == j else v for k, v in enumerate(seq)]]))
    elif kind not in ("number", "list"):
        path, value = draw(st.sampled_from(everything))
        parent, key = at(tree, path[:-1]), path[-1]
        if kind == "delete":
            del parent[key]
        elif kind == "replace":
            parent[key] = draw(SCALARS.map(copy.deepcopy))
        elif kind == "wrap":
            parent[key] = copy.deepcopy(draw(st.sampled_from([[value], {"value": value}, [[value]], [value] * 2])))
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6) | st.sampled_from(keys) | st.sampled_from(
                [LONG, MANY_LINES, str(key)[:-1] or "x", str(key).upper(), f" {key}"]))] = parent.pop(key)
    return tree


def hot(draw, tree, spots):
    """Set one of the fields a loader reads: ``spots`` are (path, values); a path step is a key,
    a list of keys to pick from, or ANY (any key present); a last step RENAME renames a key."""
    path, values = draw(st.sampled_from(spots))
    node, steps = tree, []
    for step in path:
        if steps:
            last = steps[-1]
            node = node.get(last) if isinstance(node, dict) else node[last] if isinstance(last, int) else None
        keys = sorted(node, key=str) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        if not keys:
            return tree
        steps.append(draw(st.sampled_from(keys)) if step in (ANY, RENAME) else
                     draw(st.sampled_from(step)) if isinstance(step, list) else step)
    if isinstance(node, dict) and path[-1] is RENAME:
        node[draw(values)] = node.pop(steps[-1])
    elif isinstance(node, dict):
        node[steps[-1]] = copy.deepcopy(draw(values))
    return tree


@st.composite
def mutated(draw, tree, spots):
    tree = copy.deepcopy(tree)
    for _ in range(draw(st.integers(1, 3))):
        tree = hot(draw, tree, spots) if draw(st.booleans()) else mutate(draw, tree)
    return tree


@st.composite
def corrupted(draw, text: str, snippets: list[str]) -> bytes:
    """``text`` cut, characters dropped or inserted, values replaced by ``snippets``, bytes flipped."""
    flips = 0
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        kind = draw(st.sampled_from(["truncate", "delete", "insert", "tab", "flip"] + ["snippet"] * 5))
        pos = draw(st.integers(0, len(text)))
        if kind in ("truncate", "delete"):
            text = text[:pos] + (text[pos + 1:] if kind == "delete" else "")
        elif kind in ("insert", "tab"):
            char = "\t" if kind == "tab" else draw(st.one_of(st.sampled_from(list("\n :-[]{},'\"#&*!|>%@`0$\\")),
                                                              st.characters(codec="utf-8")))
            text = text[:pos] + char + text[pos:]
        elif kind == "snippet" and (spots := list(VALUE.finditer(text))):
            spot = draw(st.sampled_from(spots))
            text = text[:spot.start()] + draw(st.sampled_from(snippets)) + text[spot.end():]
        flips += kind == "flip"
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(flips if data else 0):
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    return bytes(data)


def write(folder, name: str, data: bytes) -> str:
    (folder / name).write_bytes(data)
    return str(folder / name)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# --- machines -----------------------------------------------------------------------------------

FIGURES = st.sampled_from(["auto", "19.5 TFLOPS", "1e3", "1_000", "0x10"]) | SCALARS
MACHINE_SPOTS = [((["devices_per_node", "nodes", "profile", "name", "description"],), FIGURES),
                 (("device", ["name", "peak_tflops", "memory_gib", "memory_bandwidth_gb_per_s", "efficiency"]),
                  FIGURES),
                 (("device", "peak_tflops", ["float32", "float64", "float16", "int4"]), FIGURES),
                 ((["intra", "inter"], ["latency_us", "bandwidth_gb_per_s", "reduce_gb_per_s", "name"]), FIGURES)]
MACHINE_CASES = st.sampled_from(sorted(MACHINE_TREES)).flatmap(
    lambda n: mutated(MACHINE_TREES[n], MACHINE_SPOTS)).map(
    lambda tree: yaml.safe_dump(tree, sort_keys=False, allow_unicode=True))
MACHINE_BYTES = st.sampled_from(sorted(MACHINE_TEXTS)).flatmap(lambda n: corrupted(MACHINE_TEXTS[n], YAML_SNIPPETS))


@MANY
@given(MACHINE_CASES | MACHINE_BYTES.map(lambda data: data.decode("latin-1")))
def test_machine_yaml_loads_or_fails_cleanly(text):
    """Mutated trees dumped as YAML, and corrupted text (its bytes read as latin-1)."""
    machine = outcome(lambda: machine_from_yaml(text, "fuzz/machine.yaml"), text)
    assert machine is None or isinstance(machine, Machine)


@FUZZ
@given(MACHINE_CASES)
def test_accepted_machines_have_finite_positive_figures(text):
    """What passed the checks ("a positive finite number") is still finite and positive in SI units."""
    try:
        m = machine_from_yaml(text, "fuzz/machine.yaml")
    except Exception:  # noqa: BLE001 - the tests above report those
        return
    figures = {**m.device.peak_flops, **{k: getattr(m.device, k) for k in ("efficiency", "mem_capacity_bytes",
                                                                          "mem_bandwidth_bytes_per_s")},
               **{f"{lv}.{k}": getattr(getattr(m, lv), k) for lv in ("intra", "inter") for k in _fit(0, 0)}}
    bad = {k: v for k, v in figures.items() if not (math.isfinite(v) and v > 0)}
    assert not bad, f"accepted, but {bad}\ninput: {show(text)}"


A100 = MACHINE_TEXTS["dgx-a100"]
FILE_CASES = {"latin-1": A100.replace("(8 x", "(\u00e9 8 x").encode("latin-1"), "0xff first": b"\xff" + A100.encode(),
              "utf-16": A100.encode("utf-16"), "nul bytes": b"\x00" * 16, "empty": b"", "bom only": b"\xef\xbb\xbf",
              "bom + crlf": b"\xef\xbb\xbf" + A100.replace("\n", "\r\n").encode(),
              "cut in a utf-8 char": A100.replace("dgx-a100", "dgx-\u00e9").encode()[:A100.index("dgx-a100") + 5]}


@pytest.mark.parametrize("case", sorted(FILE_CASES) + ["a directory"])
def test_machine_files_with_bad_bytes_fail_cleanly(scratch, case):
    (scratch / "dir.yaml").mkdir(exist_ok=True)
    path = write(scratch, "bytes.yaml", FILE_CASES[case]) if case in FILE_CASES else str(scratch / "dir.yaml")
    outcome(lambda: load_machine(path), FILE_CASES.get(case, path))


# --- profile tables -----------------------------------------------------------------------------

def _fit(alpha, beta, gamma=0.0, **extra):
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": gamma, **extra}


COMM = {"ranks": 2, "bench": 2, "link": _fit(2e-6, 2e-10, 1e-10),
        "collectives": {"allreduce": _fit(5e-6, 2e-10, 1e-10),
                        "alltoall": _fit(5e-6, 1e-10, regimes=[[1024.0, 2e-6, 5e-10, 0.0], [None, 9e-6, 2e-10, 0.0]])},
        "cold": {"collectives": {"allreduce": _fit(5e-5, 2e-9, 1e-9)}}}
STRATEGIES_2 = (Strategy.of(2, N=2), Strategy.of(2, F=2))


@pytest.fixture(scope="module")
def table_text(tmp_path_factory) -> str:
    """A real table: two calls timed here, lenet5's calls at the roofline, dispatch entries, comm fits."""
    path = tmp_path_factory.mktemp("table") / "t.json"
    run = profile_calls(_two_calls(), open_for_device(str(path), fingerprint("numpy", 1, 2)), policy=QUICK,
                        out=str(path))
    roof, entries = Roofline(LOCAL), {}
    for layer in LENET.layers:
        local = local_layer(layer, STRATEGIES_2[0], 8)
        for call in (c for ps in PASSES for c in kernel_calls(local, ps, "im2col")):
            entries[call.key] = Entry(roof.call_s(call), roof.call_s(call) * 1.1, 0.05, 5, call.flops, call.bytes)
    dispatch = {"dispatch/h6": Entry(2e-5, 2e-5, 0.1, 9, 0, 1000),
                "dispatch/h14": Entry(4e-5, 5e-5, 0.1, 9, 0, 10 ** 7)}
    write_table(replace(with_entries(run.table, entries), comm=COMM, executor=dispatch), path)
    return path.read_text(encoding="utf-8")


def use_table(table):
    """What the planner does with a table: a compute model and links from it, lenet5's layers costed."""
    pc, machine = ProfiledCompute(table, Roofline(LOCAL)), links_from_table(LOCAL, table)
    times = [collective_s(c, n, 2, 1, machine, cold=cold) for c in ("allreduce", "alltoall", "allgather")
             for n in (100, 1e6) for cold in (False, True)]
    times += [layer_estimate(layer, s, 8, machine, pc, "im2col" if layer.op == "conv2d" else "").total_s
              for layer in LENET.layers for s in STRATEGIES_2 if check_fits(layer, s, 8) is None]
    assert not any(math.isnan(t) or t < 0 for t in times), f"a NaN or negative time: {times}"
    return table


ENTRY_FIELDS = ["min_s", "median_s", "spread", "count", "flops", "bytes"]
TABLE_VALUES = [5e-324, 1e-300, 1e308, HUGE, 2 ** 1024, 10 ** 300, -1, 0, math.nan, math.inf, "1", None, [1], {}]
BAD_KEYS = ["nope.fwd|64|float32|", "relu.fwd|a,b|float32|", "relu.fwd|-1|float32|", "relu.fwd|1|float32",
            "relu.fwd|1|float32||", f"relu.fwd|{'9' * 5000}|float32|", f"relu.fwd|{'1' * 400}|float32|",
            "relu.fwd|1|float99|", "linear.fwd|64|float32|", "linear.fwd|64,64,64,64,64|float32|winograd",
            "relu.fwd||float32|", f"relu.fwd|1|{LONG}|", "dispatch/x", "dispatch", ""]
TABLE_SPOTS = [((["entries", "executor"], ANY, ENTRY_FIELDS), st.sampled_from(TABLE_VALUES)),
               ((["entries", "executor"], RENAME), st.sampled_from(BAD_KEYS)),
               (("comm", "collectives"), st.sampled_from(["ab", 5, [1, 2], [["allreduce", _fit(1e-6, 1e-9)]], None,
                                                          {"allreduce": 5}, {"nope": _fit(1e-6, 1e-9)}])),
               (("comm", ["link", "cold", "ranks"]), st.sampled_from([5, "x", [1], {}, {"collectives": 5}, None,
                                                                      {"collectives": [["a", 1]]}, HUGE, -1])),
               (("comm", "collectives", ANY, ["alpha_s", "beta_s_per_byte", "gamma_s_per_byte"]),
                st.sampled_from(TABLE_VALUES)),
               (("comm", "collectives", ANY, "regimes"), st.sampled_from(
                   [[[None, HUGE, 0, 0]], [[1, 2, 3]], "1234", [["a", "b", "c", "d"]], [[-1, 1e-6, 1e-9, 0]], 5, [5],
                    [[math.nan, 1e-6, 1e-9, 0]], [[HUGE, 1e-6, 1e-9, 0]], [None], [[None, 1e308, 1e308, 1e308]]])),
               (("comm", ["link", "cold"], ANY), st.sampled_from(TABLE_VALUES)),
               (("fingerprint", ["concurrency", "threads", "cores", "device", "backend", "memory_bytes"]),
                st.sampled_from(["2", None, [2], HUGE, -1, 0, "x", 2.5, math.nan, LONG])),
               ((["format", "version"],), st.sampled_from([1.0, True, "1", HUGE, LONG, "dnnplan-profile "]))]


@FUZZ
@given(st.data())
def test_tables_read_and_use_or_fail_cleanly(scratch, table_text, data):
    """Mutated trees written as JSON, and corrupted text; a table read is then used."""
    tree = mutated(json.loads(table_text), TABLE_SPOTS)
    raw = data.draw(tree.map(lambda t: json.dumps(t, indent=1).encode("utf-8", "surrogatepass"))
                    | corrupted(table_text, JSON_SNIPPETS), label="file")
    path = write(scratch, "table.json", raw)
    outcome(lambda: use_table(read_table(path)), raw)


# --- plans --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_texts(tmp_path_factory) -> dict[str, str]:
    """``dnnplan plan lenet5 --devices 4 --out FILE`` in YAML and JSON."""
    folder, out = tmp_path_factory.mktemp("plans"), {}
    for suffix in (".yaml", ".json"):
        res = CliRunner().invoke(app, ["plan", "lenet5", "--devices", "4", "--out", str(folder / f"p{suffix}")])
        assert res.exit_code == 0, res.output
        out[suffix] = (folder / f"p{suffix}").read_text(encoding="utf-8")
    return out


DEVICES = [0, -4, 3, 8, 2, 1, 4.0, "4", True, 2 ** 63, HUGE, 16384, 10 ** 30, None, [4]]
PLAN_VALUES = {"devices": DEVICES, "batch": DEVICES + [127, 10 ** 9],
               "machine": ["summit", "local", "dgx-h100", "nope", "x/y.yaml", "", None, 5, ["dgx-a100"], LONG, "/"],
               "network": ["resnet18", "mlp", "nope", "x.yaml", "/", "", None, 5, ["lenet5"], LONG, "lenet5\x00"],
               "step_s": [math.nan, math.inf, -1, "x", None, HUGE, [1]],
               "memory_peak_bytes": [math.nan, math.inf, "x", None, HUGE, 1.5, [1]],
               "baselines": ["abc", 5, [1], [{"name": "x"}], [{"step_s": 1}], [{"name": "d", "step_s": "x"}],
                             [{"name": "d", "step_s": 1, "memory_peak_bytes": math.inf}], None, {"a": 1}],
               "solver": ["abc", 5, [1, 2], [["a", 1]], None, {"a": HUGE}],
               "version": [2, "1", 1.0, True, None, LONG, HUGE], "network_hash": [LONG, 5, None, "", [1]]}
LAYER_VALUES = {"algorithm": ["direct", "im2col", "winograd", "fft", "", None, 5, ["fft"], "nope", {"a": 1}, LONG],
                "name": ["conv1", "relu1", "nope", [1], {"a": 1}, LONG, None, 5, MANY_LINES],
                "fwd_s": ["x", None, HUGE, math.nan, math.inf, [1], {}],
                "memory_bytes": ["x", None, HUGE, math.nan, math.inf, 1.5, [1]],
                "strategy": [{"N": 2, "F": 2}, {"F": 4}, {"C": 4}, {"H": 4}, {"W": 2, "N": 2}, {"N": 4, "R": 1},
                             {"R": 4}, {"N": 3}, {"N": 0}, {"N": -4}, {"N": HUGE}, {"F": 4, "N": HUGE}, {"N": 4.0},
                             {"N": "4"}, {"N": True}, {"n": 4}, {"Q": 4}, {LONG: 4}, {"N": 2 ** 64},
                             {"N": 4, "R": HUGE}, {"N": 4, "R": "x"}, [4], "N=4", None, {}, {"N": None}]}
PLAN_SPOTS = ([((k,), st.sampled_from(v)) for k, v in PLAN_VALUES.items()]
              + [(("layers", ANY, k), st.sampled_from(v) | SCALARS) for k, v in LAYER_VALUES.items()]
              + [(("layers", ANY, "strategy", ["N", "F", "C", "H", "W", "R"]), SCALARS),
                 (("baselines", ANY, ["name", "step_s", "memory_peak_bytes"]), SCALARS)])


@FUZZ
@given(st.data())
def test_plans_read_or_fail_cleanly(scratch, plan_texts, data):
    """Mutated trees written as YAML or JSON, and corrupted text."""
    suffix = data.draw(st.sampled_from(sorted(plan_texts)), label="format")
    text = plan_texts[suffix]
    snippets, dump = (JSON_SNIPPETS, json.dumps) if suffix == ".json" else (YAML_SNIPPETS, yaml.safe_dump)
    raw = data.draw(mutated(yaml.safe_load(text), PLAN_SPOTS).map(lambda t: dump(t).encode("utf-8", "surrogatepass"))
                    | corrupted(text, snippets), label="file")
    path = write(scratch, f"plan{suffix}", raw)
    result = outcome(lambda: read_plan(path), raw)
    assert result is None or isinstance(result[0], Plan)


def test_the_good_inputs_load(scratch, table_text, plan_texts):
    for name, text in MACHINE_TEXTS.items():
        assert isinstance(machine_from_yaml(text, f"{name}.yaml"), Machine)
    table = use_table(read_table(write(scratch, "good.json", table_text.encode())))
    assert table.comm["collectives"] and table.executor and len(table.entries) > 20
    for suffix, text in plan_texts.items():
        plan, _ = read_plan(write(scratch, f"good{suffix}", text.encode()))
        assert plan.devices == 4 and len(plan.layers) == len(LENET.layers)
