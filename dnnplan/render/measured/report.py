"""`dnnplan validate --report DIR`: a report a person reads, from the validate's JSON.

DIR gets ``report.md`` (what ran, on what, when and from which commit; the summary; one table of
every plan and one of each plan's layers, the ahead-of-time error first and the model error given
in-run kernel times beside it (executor.report.in_run); how to read them), ``summary.json`` (the JSON's
``summary``) and the figures (:mod:`dnnplan.render.measured.figures`). Every number comes from the JSON
object `--json` writes, formatted by the functions here, so the report, the figures and the
JSON cannot disagree. Relative errors print as signed percentages with one decimal, absolute
errors (the summary) unsigned.
"""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

from dnnplan.output import write_json_file
from dnnplan.render import fmt
from dnnplan.render.measured import figures
from executor.report.in_run import LABEL as IN_RUN
from networks.errors import DnnplanError
from networks.writing import failure, write_file

REPORT_MD, SUMMARY_JSON = "report.md", "summary.json"
ROOT = Path(__file__).resolve().parents[2]

SUMMARY_LABELS = (
    ("mean_abs_step_error", "mean |step error| over plans (ahead of time)"),
    ("worst_abs_step_error", "worst |step error| (ahead of time)"),
    ("profile_mean_abs_step_error", "mean |step error| over plans, from the profile alone (ahead of time)"),
    ("profile_worst_abs_step_error", "worst |step error|, from the profile alone"),
    ("in_run_mean_abs_step_error", f"mean |step error| over plans, {IN_RUN}"),
    ("in_run_worst_abs_step_error", f"worst |step error|, {IN_RUN}"),
    ("layer_median_error", "median |layer error| (every layer of every plan)"),
    ("layer_p90_error", "90th percentile |layer error|"),
    ("memory_error", "mean |peak memory error| over plans"),
    ("best_plan_loss", "planner's plan measured against the fastest measured (0: it was fastest)"),
    ("noise_floor", "noise floor: median difference between repeats of one plan"),
)

HOW_TO_READ = """\
**How to read this.** Each plan was predicted before it ran, from the kernel profile this computer
already had (timed in earlier processes, or while planning), each plan's kernels (and, on several
ranks, its collectives) then timed again in its step's order and context before any plan ran
(unless `--no-step-context`; the prediction from the profile alone, its kernels timed in
isolation, is in the *profile-alone* columns): the *step
error* is the headline,
(measured - predicted) / predicted, positive when the run was slower than predicted. Beside it, the
*""" + IN_RUN + """* comes from the same run: every rank timed the prediction's kernels (and, on
one node, its collectives) again inside the run, after untimed steps run once the timed ones had
run back to back, and the same cost model predicted from those times. It is not a prediction (it needs the
run) but a check of how the model composes kernels into a step. The distance between the two
columns is how far the kernels' times moved between the profile and this run (a shared machine's
speed moves within minutes; the in-run samples also re-create each kernel's place in the step);
what is left in the in-run error is the model's own. The measured
step is the median over timed steps of the slowest rank's step; min and max are its spread (over
every repeat). A layer's error compares its total time (forward, backward, communication, gradient
allreduce, update) and leaves out time spent waiting for other ranks. Memory is the largest rank's
peak of the arrays it held, measured in an extra, untimed step (memory MPI allocates itself is not
seen), against the cost model's peak per device. Errors smaller than the *noise floor* (how far
repeats of one plan differ; `--repeats 2` or more) are within the run-to-run noise of this machine.
The check compares the distributed step with one process on the whole batch (loss and every
weight gradient)."""


def pct(rel: float | None) -> str:
    """A signed relative error: ``+12.3%`` (``-`` for none)."""
    return "-" if rel is None else f"{rel * 100:+.1f}%"


def abs_pct(value: float | None) -> str:
    """An unsigned error or fraction: ``12.3%`` (``-`` for none)."""
    return "-" if value is None else f"{value * 100:.1f}%"


def seconds(value: float | None) -> str:
    return "-" if value is None else fmt.seconds(value)


def nbytes(value: int | None) -> str:
    return "-" if value is None else fmt.nbytes(value)


def check_text(check: dict | None) -> str:
    if check is None:
        return "-"
    word = "ok" if check["passed"] else f"FAILED ({check['worst_tensor']})"
    return f"{word} {check['worst_rel_error']:.1e}"


def check_report_folder(path: str, force: bool) -> None:
    """Before any work: ``path`` is an existing folder or can be created in an existing one, it
    holds no earlier report unless ``force``, and matplotlib can be imported."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise DnnplanError(f"--report {path} is a file, not a folder", hint="pass a folder (it is created if missing)")
    if not target.exists() and not target.resolve().parent.is_dir():
        raise DnnplanError(f"cannot write the report to {path}: the folder {target.resolve().parent} does not exist",
                           hint="create it first, or pass a folder in an existing one")
    if (target / REPORT_MD).exists() and not force:
        raise DnnplanError(f"{path} already holds a report ({REPORT_MD})", hint="pass --force to replace it")
    figures.pyplot()


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=5)


def git_commit() -> str:
    """The commit this dnnplan runs from (short hash, marked when the tree has changes); "unknown"
    when it is not a git checkout or git is missing (best effort, never an error)."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = _git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(c) for c in header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


PLAN_HEADER = ["plan", "strategies", "predicted step", "measured step (median)", "measured min", "measured max",
               "step error", "step error range", "profile-alone step", "profile-alone error", "in-run predicted step",
               IN_RUN, "layer median |error|",
               "memory predicted", "memory measured", "memory error", "check"]


def plan_cells(r: dict) -> list[str]:
    """One plan's row of the plans table (the columns of :data:`PLAN_HEADER`)."""
    spread = (f"{pct(r.get('step_rel_min'))} to {pct(r.get('step_rel_max'))}" if r.get("repeats", 1) > 1 else "-")
    return [r["name"], r["strategies"], fmt.seconds(r["predicted_step_s"]), fmt.seconds(r["measured_step_s"]),
            fmt.seconds(r["measured_step_min_s"]), fmt.seconds(r["measured_step_max_s"]), pct(r["step_rel"]), spread,
            seconds(r.get("profile_predicted_step_s")), pct(r.get("profile_step_rel")),
            seconds(r.get("in_run_predicted_step_s")), pct(r.get("in_run_step_rel")),
            abs_pct(r["layer_median_abs_rel"]), nbytes(r.get("predicted_peak_bytes")),
            nbytes(r.get("measured_peak_bytes")), pct(r.get("memory_rel")), check_text(r.get("check"))]


def _settings(data: dict, meta: dict) -> list[str]:
    repeats = data.get("repeats", 1)
    threads = sorted({r.get("threads") for r in data["plans"] if r.get("threads")})
    rows = [["network", data["network"]], ["ranks", f"{data['ranks']}" + (
                f" ({', '.join(map(str, threads))} thread(s) each)" if threads else "")],
            ["batch", data["batch"]], ["machine", data["machine"]], ["compute model", data["compute_model"]],
            ["steps", f"{data['steps']} timed after {data['warmup']} warm-up, each plan run {repeats} time(s)"],
            ["in-run kernel timing", in_run_text(data.get("in_run_note"))],
            ["date", meta.get("date", "")], ["git commit", meta.get("commit", "unknown")],
            ["command", f"`{meta.get('command', '')}`"]]
    return _table(["setting", "value"], rows)


def in_run_text(note: str | None) -> str:
    """The settings table's word on the in-run column: on, or why it is empty."""
    return "on: after untimed steps that follow the timed ones" if note is None else f"none: {note}"


def _layers(r: dict) -> list[str]:
    rows = [[l["name"], fmt.seconds(l["predicted_s"]), fmt.seconds(l["measured_s"]), pct(l["rel"]),
             seconds(l.get("in_run_predicted_s")), pct(l.get("in_run_rel"))] for l in r.get("layers", [])]
    header = ["layer", "predicted", "measured (median)", "error", "in-run predicted", IN_RUN]
    return [f"### {r['name']}", ""] + _table(header, rows) + [""]


def markdown(data: dict, meta: dict, pictures: list[str]) -> str:
    """The report's text from the validate's JSON (``data``) and ``meta`` (date, commit, command)."""
    summary = data["summary"]
    lines = [f"# dnnplan validate: {data['network']} on {data['ranks']} rank(s)", "", *_settings(data, meta), "",
             "## Summary", "", *_table(["measure", "value"],
                                        [[label, (pct if key == "best_plan_loss" else abs_pct)(summary.get(key))]
                                         for key, label in SUMMARY_LABELS]), "",
             "## Plans", "", *_table(PLAN_HEADER, [plan_cells(r) for r in data["plans"]]), ""]
    if data.get("in_run_note"):
        lines += [f"The in-run columns are empty: {data['in_run_note']}.", ""]
    lines += ["## Figures", ""] + [f"![{name[:-4]}]({name})" for name in pictures] + [""]
    lines += ["## Layers", ""] + [line for r in data["plans"] for line in _layers(r)]
    lines += ["## How to read this", "", HOW_TO_READ, ""]
    return "\n".join(lines)


def write_report(folder: str, data: dict, command: str) -> list[str]:
    """Write the report, summary.json and figures of a validate (``data``: its JSON) into ``folder``
    (created when missing); the paths written."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise failure("making the folder", err, folder, kept=False) from None
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(), "command": command}
    pictures = figures.write_figures(data["plans"], folder, f"{data['network']}, {data['ranks']} rank(s)")
    write_json_file(os.path.join(folder, SUMMARY_JSON), data["summary"])
    path = os.path.join(folder, REPORT_MD)
    write_file(path, markdown(data, meta, pictures))
    return [path, os.path.join(folder, SUMMARY_JSON)] + [os.path.join(folder, p) for p in pictures]
