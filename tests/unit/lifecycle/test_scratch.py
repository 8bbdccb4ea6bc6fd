"""Scratch folders (lifecycle.scratch): removed on the way out, and a killed command's by the next
command that makes one; a live command's, and a folder no dnnplan owns, never."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lifecycle.scratch import OWNER, process_start, remove_orphans, scratch_folder


def test_a_scratch_folder_names_its_owner_and_goes_with_it(tmp_path):
    with scratch_folder("run", str(tmp_path)) as folder:
        assert Path(folder).name.startswith("dnnplan-run-")
        assert Path(folder, OWNER).read_text() == f"{os.getpid()} {process_start(os.getpid())}"
    assert not Path(folder).exists()


def test_a_killed_commands_folder_is_removed_by_the_next_one(tmp_path):
    """A process that made a scratch folder and was killed (kill -9: nothing of it ran its cleanup)
    leaves an orphan; the next scratch folder made removes it, and leaves a live owner's and an
    unowned folder alone."""
    code = ("import os, signal, sys; from lifecycle.scratch import scratch_folder\n"
            f"with scratch_folder('validate', {str(tmp_path)!r}) as f:\n"
            "    print(f, flush=True); os.kill(os.getpid(), signal.SIGKILL)\n")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           cwd=str(Path(__file__).resolve().parents[3]))
    orphan = Path(child.stdout.strip())
    assert child.returncode == -9 and orphan.is_dir() and (orphan / OWNER).exists()
    unowned = tmp_path / "dnnplan-run-byhand"
    unowned.mkdir()
    with scratch_folder("run", str(tmp_path)) as live:
        assert not orphan.exists() and unowned.is_dir()
        assert remove_orphans(str(tmp_path)) == [] and Path(live).is_dir()  # its owner runs: kept
