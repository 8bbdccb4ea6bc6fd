"""`--json` prints exactly one JSON object on stdout, on every path, as a separate process sees it.

Run as subprocesses (not CliRunner) on purpose: the native ILP solver (highspy) wrote its banner
straight to file descriptor 1, below ``sys.stdout``, where only a real pipe catches it. Each run is
a fresh process, so the banner, printed once per process, would show in every ILP case here.
"""

import json
import subprocess
import sys

import pytest

from tests.support.paths import ROOT


def dnnplan(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dnnplan", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def one_document(stdout: str, kind: type = dict):
    """stdout parses as one JSON value of ``kind``, with nothing before or after it."""
    data = json.loads(stdout)
    assert isinstance(data, kind)
    return data


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("plans") / "lenet5-2.json"
    dnnplan("plan", "lenet5", "--devices", "2", "--batch", "8", "--machine", "dgx-a100", "--out", str(path))
    return str(path)


@pytest.mark.parametrize("args, solver", [
    # the memory limit binds: the Lagrangian bound rules candidates out, Pareto fronts solve the rest
    # (the next two go through the ILP, whose banner must not reach stdout)
    (["vgg16", "--devices", "1", "--machine", "summit", "--batch", "112"], "lagrange+pareto"),
    (["vgg16", "--devices", "1", "--machine", "summit", "--batch", "112", "--solver", "reduced"], "reduced+ilp-highs"),
    (["googlenet", "--devices", "64", "--solver", "ilp"], "ilp-highs"),
])
def test_plan_json_on_the_ilp_path(args, solver):
    # a time limit far beyond these solves (seconds) so a loaded machine cannot cut them short
    data = one_document(dnnplan("plan", *args, "--json", "--time-limit", "900").stdout)
    assert data["solver"]["solver"] == solver  # the case really went the path named
    assert data["status"] == "done"  # not stopped (a stop's answer says "interrupted")


def test_plan_sweep_json_through_the_ilp():
    data = one_document(dnnplan("plan", "lenet5", "--sweep", "1,2,4", "--solver", "ilp", "--json").stdout)
    assert [r["devices"] for r in data["rows"]] == [1, 2, 4]
    assert {r["solver"] for r in data["rows"]} == {"ilp-highs"}


def test_plan_sweep_json():
    data = one_document(dnnplan("plan", "lenet5", "--sweep", "1,2,4", "--json").stdout)
    assert [r["devices"] for r in data["rows"]] == [1, 2, 4]


def test_predict_json():
    data = one_document(dnnplan("predict", "lenet5", "--devices", "2", "--json").stdout)
    assert data["step_s"] > 0
    # the step by term under the names `plan --json` gives them, summing to the step
    terms = data["step_breakdown_s"]
    assert {"forward", "backward", "gradient sync", "update"} <= set(terms)
    assert sum(terms.values()) == pytest.approx(data["step_s"], rel=1e-9)
    piped = one_document(dnnplan("predict", "gpt-tiny", "-p", "2", "--pipeline", "2", "--micro-batches", "2",
                                 "--json").stdout)
    assert "bubble" in piped["step_breakdown_s"]
    assert sum(piped["step_breakdown_s"].values()) == pytest.approx(piped["step_s"], rel=1e-9)


def test_predict_plan_file_json(plan_file):
    data = one_document(dnnplan("predict", plan_file, "--json").stdout)
    assert data["step_s"] > 0


@pytest.mark.parametrize("args, kind", [(["info", "lenet5"], dict),
                                        (["networks"], list), (["machines"], list)])  # the listings are arrays
def test_listing_json(args, kind):
    assert one_document(dnnplan(*args, "--json").stdout, kind)


@pytest.mark.mpi
def test_execute_json_file(plan_file, tmp_path):
    out = tmp_path / "execute.json"
    dnnplan("execute", plan_file, "--ranks", "2", "--steps", "1", "--warmup", "0", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["ranks"] == 2 and data["steps"] == 1


@pytest.mark.mpi
def test_validate_json_file(tmp_path):
    out = tmp_path / "validate.json"
    dnnplan("validate", "lenet5", "--machine", "dgx-a100", "--ranks", "2", "--batch", "8", "--steps", "1",
            "--warmup", "0", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["network"] == "lenet5" and data["ranks"] == 2
