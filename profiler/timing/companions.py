"""Companion load: the other ranks of a run that share this computer, while a kernel is timed.

In a P-rank run on one machine, every rank computes at the same time, so each kernel shares the
memory system and caches with P - 1 others and runs slower than alone (by how much on one machine:
docs/profiler.md, "Ranks sharing the machine"). A profile for P ranks is therefore timed with
P - 1 companion processes running the same kernel call in a loop (as the other ranks of a data-
parallel step would), each with the same thread count.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from contextlib import contextmanager
from typing import Iterator

import numpy
from threadpoolctl import threadpool_limits

from costmodel.calls.kernel_call import KernelCall
from profiler.timing import harness
from lifecycle.jobs import LAUNCHER_ENV, start_time, watch_launcher
from lifecycle.stops import sigint_handled_by

KEEP_BYTES = 1 << 30  # a companion keeps the operands of the calls it was given up to this many bytes


@contextmanager
def ctrl_c_after_fork() -> Iterator[None]:
    """A Ctrl-C that arrives meanwhile is noted, and raised again once this block is left. Python
    runs its at-fork hooks (logging's lock release, in parent and child) around every fork, and a
    KeyboardInterrupt raised inside such a hook is printed as "Exception ignored" and dropped: a
    Ctrl-C landing while a companion is forked would be lost in the parent (the command ran on to
    its end and exited 0) and print a traceback from the child. The child inherits the noting
    handler until it ignores Ctrl-C (its parent ends it). Where the handler cannot be set
    (lifecycle.stops) this changes nothing."""
    noted: list[int] = []
    try:
        with sigint_handled_by(lambda signum, frame: noted.append(signum)):
            yield
    finally:
        if noted:
            signal.raise_signal(noted[0])  # as the handler restored takes it


def _companion(conn, threads: int) -> None:  # pragma: no cover - runs in a child process
    # a terminal's Ctrl-C (or hang-up) reaches the whole process group: the parent handles it and
    # ends companions; a SIGTERM of its own ends a companion at once (its parent's handler is not its own)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()  # a companion ends itself should its parent die without a word (kill -9)
    watch_launcher({LAUNCHER_ENV: f"{parent}:{start_time(parent) or ''}"})
    try:
        _serve(conn, threads)
    except (EOFError, OSError):  # the parent is gone (its end of the pipe closed): nothing to run for
        return


def _serve(conn, threads: int) -> None:  # pragma: no cover - runs in a child process
    built: dict = {}  # call key -> its closure, kept up to KEEP_BYTES (side-by-side rounds reload calls)
    room = KEEP_BYTES
    with threadpool_limits(limits=threads):
        run = None
        while True:
            if run is None or conn.poll():  # idle companions block here, using no CPU
                msg = conn.recv()
                if msg is None:
                    return
                run = None
                if msg != "pause":
                    run = built.get(msg.key)
                    if run is None:
                        try:
                            run = harness.build(msg, numpy)  # looked up here: tests replace it
                        except Exception:  # noqa: BLE001 - a call it cannot build runs nothing
                            run = None
                        if run is not None and msg.bytes <= room:
                            room -= msg.bytes
                            built[msg.key] = run
                conn.send("ready")
                if run is None:
                    continue
            run()


class Companions:
    """``count`` background processes that run whatever kernel call they were last given."""

    def __init__(self, count: int, threads: int = 1):
        ctx = mp.get_context("fork")
        self.conns = []
        self.procs = []
        try:
            with ctrl_c_after_fork():
                for _ in range(max(0, count)):
                    parent, child = ctx.Pipe()
                    proc = ctx.Process(target=_companion, args=(child, threads), daemon=True)
                    proc.start()
                    self.conns.append(parent)
                    self.procs.append(proc)
        except BaseException:
            self.close()
            raise

    def load(self, call: KernelCall) -> None:
        """Switch every companion to ``call`` and wait until each has built its operands."""
        for conn in self.conns:
            conn.send(call)
        for conn in self.conns:
            conn.recv()

    def pause(self) -> None:
        """Stop every companion's loop (they wait, idle, for the next call). A companion that has
        ended (a stop signal sent to the command's process group ends it with the command: its
        pipe resets) ends the others: they are started again for the next call."""
        try:
            for conn in self.conns:
                conn.send("pause")
            for conn in self.conns:
                conn.recv()
        except (EOFError, OSError):
            self.close()

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        self.conns, self.procs = [], []

    def __enter__(self) -> "Companions":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
