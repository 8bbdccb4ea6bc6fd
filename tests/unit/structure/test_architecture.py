"""The layout holds: one-way layers (import-linter), no import cycle among the project's modules,
imports at module top, no two files named apart only by a plural "s", every package saying what it
owns (docs/architecture.md). The sizes of files and functions are a report for review, not a test:
.ci/largest prints the largest of each (CI runs it after the tests)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.paths import BENCH, ROOT

PACKAGES = ("dnnplan", "executor", "planner", "profiler", "kernels", "costmodel", "lifecycle", "networks")


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_the_layers_contract_holds():
    """`lint-imports` checks pyproject's contracts: a wrong-way import fails here."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is a test dependency (pip install -e '.[test]')"
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-3000:]


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of a directed graph (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(edges[root])))]
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found


def test_strongly_connected_finds_cycles_of_any_length():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert sorted(strongly_connected(edges)) == [["a", "b", "c"], ["d", "e"], ["f"], ["g"]]


def test_no_import_cycles():
    """No cycle among the project's modules, of any length: every strongly connected component of
    the import graph (grimp over the project's packages, external packages left out) is one module."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) - {m} for m in graph.modules}
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    assert cycles == [], "modules importing each other, directly or round a cycle:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def plural_pairs(paths: list[Path]) -> dict[tuple[str, str], list[str]]:
    """Stems (file names without .py) that differ only by a trailing "s", compared across every
    folder, with the files of each pair."""
    by_stem: dict[str, list[str]] = {}
    for path in paths:
        by_stem.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    return {(stem, stem + "s"): sorted(by_stem[stem] + by_stem[stem + "s"])
            for stem in sorted(by_stem) if stem + "s" in by_stem}


def test_no_two_files_differ_by_a_plural_s():
    """``kernel_call.py`` beside ``kernel_calls.py`` (in one folder or in two) says nothing of how
    they differ: a reader has to guess. Every .py file of the packages, the tests and the benchmarks."""
    paths = sources() + sorted((ROOT / "tests").rglob("*.py")) + sorted(BENCH.rglob("*.py"))
    pairs = plural_pairs(paths)
    assert pairs == {}, "file names apart only by a plural s (name what differs): " + "; ".join(
        f"{a} / {b}: {', '.join(files)}" for (a, b), files in pairs.items())


#: The project's modules that may be imported inside a function, where they are first needed: heavy
#: subsystems a command's common path never runs, so that its start-up, which counts against
#: `dnnplan plan --time-limit`, does not load them (dnnplan.cli loads a command's module when it
#: runs; grimp still sees these imports, so the layer and cycle checks hold them too).
DEFERRED = {
    "executor.session.execute": "the executor's run machinery: `plan` needs it on machine `local` only",
    "executor.probes.step_kernels": "with it, weighing plans in their step's context (machine `local`)",
    "profiler.ondemand": "the on-demand profiler and its kernels: machine `local` only",
    "networks.importers.hf.importer": "the Hugging Face importer: a config given instead of a network",
    "networks.importers.onnx.importer": "the ONNX importer: an ONNX file given instead of a network",
    ".ilp": "the ILP (PuLP, HiGHS) in planner.solvers: most problems are solved whole by graph reduction",
    "dnnplan.cli": "the command itself, loaded once the console script (dnnplan.entry) has a stop signal end it",
    "executor.session.export_nearest": "the nearest plans priced as `dnnplan predict PLAN.yaml` prices a plan: "
                                       "`plan --emit --nearest` only",
}


def _function_level_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom):
                names = ["." * sub.level + (sub.module or "")]
            elif isinstance(sub, ast.Import):
                names = [a.name for a in sub.names]
            else:
                continue
            for name in names:
                if name in DEFERRED:
                    continue
                if name.startswith(".") or name.split(".")[0] in PACKAGES:
                    out.append(f"{path.relative_to(ROOT)}:{sub.lineno} imports {name} inside {node.name}()")
    return out


def test_the_projects_own_modules_are_imported_at_module_top():
    """Deferred imports hide cycles from a reader; only heavy optional third-party modules and the
    subsystems named in DEFERRED may wait (with a reason)."""
    assert [line for p in sources() for line in _function_level_imports(p)] == []


def test_deferred_third_party_imports_say_why():
    """An import inside a function carries its reason on its line (``# noqa: PLC0415 - why``)."""
    missing = []
    for path in sources():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)) and "#" not in lines[sub.lineno - 1]:
                        missing.append(f"{path.relative_to(ROOT)}:{sub.lineno}")
    assert missing == []


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_package_says_what_it_owns(pkg):
    doc = ast.get_docstring(ast.parse((ROOT / pkg / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"{pkg}/__init__.py needs a docstring saying what the package owns"
