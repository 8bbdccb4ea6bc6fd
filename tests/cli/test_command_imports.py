"""A command imports what it runs (dnnplan.cli): `dnnplan plan` for a shipped machine plans
without loading the executor's run machinery, the on-demand profiler and its kernels, the reading
of launch files, the Hugging Face and ONNX importers, or any other command, since the command's
start-up counts against its --time-limit. Each run is a fresh ``python`` (the test process has imported
everything)."""

from __future__ import annotations

import json
import subprocess
import sys

#: runs ``dnnplan ARGS...`` as the console script does and writes the modules loaded when it ends
#: to the file named first (dnnplan.search_bound.end runs the exit handlers before it exits)
PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: json.dump(sorted(sys.modules), open(out, "w")))
sys.argv[0] = "dnnplan"
from dnnplan.cli import main
main()
"""
#: what planning one point on a shipped machine never runs
NOT_PLANNING = ("executor.session.execute", "executor.runtime", "executor.launch", "executor.ops", "executor.comm",
                "executor.backend", "executor.probes", "kernels", "profiler.ondemand", "planner.launch_import",
                "networks.importers.hf.importer", "networks.importers.onnx.importer")


def loaded(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], capture_output=True, text=True,
                          timeout=300)
    return proc, json.loads(out.read_text())


def test_plan_loads_neither_the_executor_nor_the_other_commands(tmp_path):
    proc, modules = loaded(tmp_path, "plan", "lenet5", "--devices", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["devices"] == 2
    assert "dnnplan.commands.plan" in modules and "planner.first_plan" in modules
    assert [m for m in modules if m.startswith(NOT_PLANNING)] == []
    assert [m for m in modules if m.startswith("dnnplan.commands.")] == ["dnnplan.commands.plan"]

