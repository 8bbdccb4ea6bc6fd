"""A stop signal that lands once the search has answered, while its answer is shown (its tables, its
JSON, its --out file): the answer is shown whole and the file written, one line says the stop came
after the search, and the command ends with the signal's code, no traceback (it lost everything,
exit 130 or 143 and only 'error: interrupted', when the signal landed there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.support.paths import ROOT


def test_a_stop_while_the_answer_is_shown_keeps_it_whole(tmp_path):
    out = tmp_path / "p.yaml"
    code = textwrap.dedent(f"""
        import os, signal, sys
        import dnnplan.commands.plan as command
        shown = command.show
        def show(*args, **kwargs):  # the stop lands as the answer is shown
            os.kill(os.getpid(), signal.SIGTERM)
            return shown(*args, **kwargs)
        command.show = show
        sys.argv = ["dnnplan", "plan", "resnet18", "-p", "4", "--time-limit", "10", "--out", {str(out)!r}, "--json"]
        from dnnplan.entry import main
        main()
    """)
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert got.returncode == 143, (got.stdout[-500:], got.stderr[-2000:])
    answer = json.loads(got.stdout)
    assert answer["step_s"] > 0 and out.is_file()
    assert "SIGTERM after" in got.stderr and "once the search had ended: its answer is shown whole" in got.stderr
    assert "Traceback" not in got.stderr and "interrupted" not in got.stderr


def test_a_stop_while_a_sweeps_table_is_shown_keeps_it_whole():
    """The same once a sweep's points are planned: the table is shown whole, then one line and 143."""
    code = textwrap.dedent("""
        import os, signal, sys
        from dnnplan.render import sweep as render
        shown = render.compare_table
        def table(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            return shown(*args, **kwargs)
        render.compare_table = table
        sys.argv = ["dnnplan", "plan", "gpt-tiny", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2", "--time-limit", "10"]
        from dnnplan.entry import main
        main()
    """)
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert got.returncode == 143, (got.stdout[-500:], got.stderr[-2000:])
    assert "machines and device counts" in got.stdout and "dgx-h100" in got.stdout
    assert "SIGTERM once the sweep had ended: its 4 points are shown whole" in got.stderr
    assert "Traceback" not in got.stderr and "interrupted" not in got.stderr
