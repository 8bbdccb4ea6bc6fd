"""The process table, read from /proc, for the tests that stop or kill a command: which processes
a command started (its whole tree, taken while it runs), and whether any of them is left.

A process is named by its pid and start time, so a pid the system hands out again is not taken
for the one that ended; a zombie (ended, waiting to be reaped) counts as gone. Nothing is matched
by name or by the args ``ps`` prints (which it cuts).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(ppid, state, start time) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], fields[19]


def table() -> dict[int, tuple[int, str, str]]:
    """Every process: pid -> (ppid, state, start time)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (got := _stat(int(name))) is not None:
            out[int(name)] = got
    return out


def tree(root: int) -> dict[int, str]:
    """``root`` and every process below it, running now: pid -> start time."""
    procs = table()
    found = {root} if root in procs else set()
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return {pid: procs[pid][2] for pid in found if procs[pid][1] not in ("Z", "X")}


def left(seen: dict[int, str]) -> list[int]:
    """The processes of ``seen`` still running (same pid and start time, not a zombie)."""
    out = []
    for pid, started in seen.items():
        got = _stat(pid)
        if got is not None and got[2] == started and got[1] not in ("Z", "X"):
            out.append(pid)
    return out


def gone_within(seen: dict[int, str], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for every process of ``seen`` to end; those still running then."""
    deadline = time.monotonic() + seconds
    while (still := left(seen)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return still


def describe(pids: list[int]) -> str:
    """``ps`` lines (full args) of ``pids``, for a failure message."""
    if not pids:
        return ""
    got = subprocess.run(["ps", "-ww", "-o", "pid,pgid,ppid,stat,args", "-p", ",".join(map(str, pids))],
                         capture_output=True, text=True)
    return got.stdout


class Lines:
    """A child's output read line by line in the background (stdout and stderr merged or not), so
    a test can wait for a progress line instead of sleeping."""

    def __init__(self, *streams):
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._read, args=(s,), daemon=True) for s in streams]
        for t in self._threads:
            t.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_for(self, test, timeout_s: float, proc: subprocess.Popen | None = None) -> str | None:
        """The first line for which ``test(line)`` holds, waiting up to ``timeout_s`` (None: not
        seen in time, or ``proc`` ended first)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                hit = next((line for line in self.lines if test(line)), None)
                if hit is not None:
                    return hit
                if time.monotonic() > deadline or (proc is not None and proc.poll() is not None
                                                   and not any(t.is_alive() for t in self._threads)):
                    return None
                self._cond.wait(0.2)

    def join(self, timeout_s: float = 10.0) -> str:
        for t in self._threads:
            t.join(timeout_s)
        return "".join(self.lines)
