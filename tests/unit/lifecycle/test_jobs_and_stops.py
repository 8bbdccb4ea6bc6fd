"""The stop signals and jobs (lifecycle.stops, lifecycle.jobs) in a process of their own: a stop landing
between starting a job and guarding it still ends the job, a signal ignored at start stays ignored,
and a rank exits once the dnnplan that started it is gone. Commands stopped end to end (execute,
validate, profile, profile-comm and their ranks): tests/mpi/test_stop_signals.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.support.paths import ROOT


# --- the signal handling itself, in a child Python --------------------------------------------------

def _python(code: str, **kw) -> subprocess.CompletedProcess:
    """``code`` in a child Python whose Ctrl-C is as a terminal's command has it: a suite run as a
    background job of a script (``pytest &``) has SIGINT ignored, which the child would inherit
    and keep (as a command keeps an ignored signal), and its Ctrl-C cases would test nothing."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def test_a_stop_landing_between_starting_a_job_and_guarding_it_still_ends_the_job():
    """The signal arrives the instant Popen returns (before the block that waits on the job): it is
    deferred until the job is guarded, then ends it, and the process still stops."""
    got = _python("""
        import os, signal, subprocess, sys, time
        from lifecycle import jobs, stops
        stops.install()
        real, started = subprocess.Popen, []
        def popen_then_sigterm(*a, **k):
            started.append(real(*a, **k))
            os.kill(os.getpid(), signal.SIGTERM)  # lands before job() hands the process over
            time.sleep(0.5)
            return started[0]
        subprocess.Popen = popen_then_sigterm
        try:
            with jobs.job(["sleep", "600"]):
                time.sleep(60)
            print("not stopped")
        except stops.Stopped as err:
            print("stopped by", signal.Signals(err.signum).name, "exit", stops.exit_code(), "job", started[0].poll())
    """)
    assert got.stdout.strip() == "stopped by SIGTERM exit 143 job -15", got.stdout + got.stderr


def test_a_signal_ignored_at_start_stays_ignored():
    """`nohup dnnplan ...` ignores SIGHUP; a background job of a script ignores SIGINT."""
    got = _python("""
        import os, signal, time
        from lifecycle import stops
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        stops.install()
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.2)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except stops.Stopped:
            print("SIGHUP ignored; SIGTERM stopped, exit", stops.exit_code(), stops.name())
    """)
    assert got.stdout.strip() == "SIGHUP ignored; SIGTERM stopped, exit 143 SIGTERM", got.stdout + got.stderr


def test_a_burst_of_stops_is_one_stop_and_a_later_one_ends_the_process_at_once():
    """Stop signals within BURST_S of the first (a held Ctrl-C, several kills at once) land while the
    first is handled and are ignored: it finishes (here, prints) and exits with the first's code. One
    after that ends the process at once, with the first signal's code, nothing more done."""
    got = _python("""
        import os, signal, time
        from lifecycle import stops
        stops.install()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except stops.Stopped:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                os.kill(os.getpid(), sig)  # the burst, while the first is handled
                time.sleep(0.01)
            print("handled", stops.exit_code(), flush=True)
            stops.BURST_S = 0.1
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)  # past the burst: at once
            time.sleep(5)
            print("not ended")
    """)
    assert got.returncode == 143 and got.stdout.strip() == "handled 143", (got.stdout, got.stderr)
    assert "Traceback" not in got.stderr


def test_a_stop_while_the_command_loads_ends_it_quietly_and_install_takes_over():
    """The console script's first code (dnnplan.entry): Ctrl-C before the command handles signals
    ends it with 130 and no traceback; once installed, a stop is the command's to handle."""
    early = _python("""
        import os, signal, time
        from lifecycle import stops
        stops.end_at_once_until_installed()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        print("not ended")
    """)
    assert (early.returncode, early.stdout, early.stderr) == (130, "", "")
    later = _python("""
        import os, signal, time
        from lifecycle import stops
        stops.end_at_once_until_installed()
        stops.install()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except stops.Stopped:
            print("the command's stop, exit", stops.exit_code())
    """)
    assert later.stdout.strip() == "the command's stop, exit 130", later.stdout + later.stderr


def test_a_rank_exits_once_its_launcher_is_gone():
    """A rank (or probe) watches the dnnplan that started it: gone (here: a process that exits at
    once, reaped), the rank exits within a second or two."""
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    from lifecycle.jobs import LAUNCHER_ENV, start_time  # noqa: PLC0415
    named = f"{launcher.pid}:{start_time(launcher.pid)}"
    rank = subprocess.Popen([sys.executable, "-c", "from lifecycle.jobs import watch_launcher; import time; "
                             "watch_launcher(); print('watching', flush=True); time.sleep(600)"], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), LAUNCHER_ENV: named},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rank.stdout.readline().strip() == "watching"
        launcher.kill()
        start = time.monotonic()
        _, err = rank.communicate(timeout=30)
        assert time.monotonic() - start < 10
        assert rank.returncode == 3 and f"dnnplan (pid {launcher.pid}) that started this process is gone" in err
    finally:
        for p in (launcher, rank):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_the_command_ends_with_its_code_when_an_exit_handler_never_returns():
    """`dnnplan plan` ends through dnnplan.search_bound.end: should an exit handler wait for ever (on a
    lock a stop signal left held), the command still ends, with its exit code and its output."""
    start = time.monotonic()
    got = _python("""
        import atexit, threading
        from dnnplan import search_bound
        search_bound.count_from_the_start()
        search_bound.EXIT_WAIT_S = 1.0
        atexit.register(threading.Event().wait)  # never returns
        print("the plan", end="")
        search_bound.end(130)
    """)
    assert (got.returncode, got.stdout) == (130, "the plan"), got.stderr
    assert time.monotonic() - start < 60


def test_a_stop_that_lands_inside_an_import_is_still_a_stop():
    """A stop raised while a C extension initialises reaches Python as ImportError('initialization
    failed') raised from it (pybind11's module init: highspy, imported at a plan's first ILP): still
    a stop; an import that fails by itself is not."""
    from lifecycle import stops

    try:
        try:
            raise stops.Stopped(15)
        except KeyboardInterrupt as stop:
            raise ImportError("initialization failed") from stop
    except ImportError as err:
        landed = err
    assert stops.stopped_by(landed) and stops.stopped_by(KeyboardInterrupt())
    assert not stops.stopped_by(ImportError("No module named 'highspy'"))


def test_a_library_caller_s_process_raises_every_stop(monkeypatch):
    """Without install() (a notebook or script calling dnnplan's functions, which outlives a stop):
    each stop is raised, none ignored as a burst nor ending the process."""
    from lifecycle import stops  # noqa: PLC0415

    for name in ("_RECEIVED", "_FIRST_AT", "_INSTALLED"):
        monkeypatch.setattr(stops, name, [])
    monkeypatch.setattr(stops, "BURST_S", 0.0)
    assert stops.arrived(2) and stops.arrived(2) and stops.arrived(15)
    assert stops.exit_code() == 130


def test_a_stop_while_holding_is_noted_not_raised_and_raised_again_after():
    """lifecycle.stops.holding: a stop signal in the block is noted (hold.stopped) and the block
    finishes; it names the signal and its exit code; after the block a stop raises again."""
    got = _python("""
        import os, signal, time
        from lifecycle import stops
        stops.install()
        with stops.holding() as hold:
            assert not hold.stopped and stops.held()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            print("finished", hold.stopped, stops.exit_code(), stops.name(), flush=True)
        assert not stops.held()
        stops._RECEIVED.clear()  # a new command's first stop
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            print("not raised")
        except stops.Stopped:
            print("raised", flush=True)
    """)
    assert got.stdout.split("\n")[:2] == ["finished True 143 SIGTERM", "raised"], (got.stdout, got.stderr)
    assert "Traceback" not in got.stderr
