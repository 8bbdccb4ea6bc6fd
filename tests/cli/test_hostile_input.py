"""Hostile or mistaken input at the command line: each case ends within 20 s with exit code 2 and one
to six lines naming what is wrong, never a traceback or an internal error.

The cases that once hung (an alias bomb formatted into a message, a device count scanned one by
one, a 300 MiB file parsed as YAML) run as separate processes under a timeout, so a regression
fails here instead of stalling the suite; the rest run in-process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dnnplan.cli import app

from tests.support.paths import ROOT, ZOO

SHIPPED = ROOT / "costmodel" / "machine" / "dgx-a100.yaml"
BOUND_S = 20.0
runner = CliRunner()

NINE = "[1, 1, 1, 1, 1, 1, 1, 1, 1]"
BOMB = "[&a " + NINE + ", " + ", ".join(
    f"&{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcdefg", "bcdefgh")) + "]"


def _write(folder: Path, name: str, text: str | bytes) -> str:
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def _machine(folder: Path, name: str, old: str, new: str) -> str:
    text = SHIPPED.read_text()
    assert old in text
    return _write(folder, name, text.replace(old, new, 1))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("hostile")
    (d / "folder.yaml").mkdir()
    big = d / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(300 * 2**20)  # sparse: 300 MiB of zero bytes, written in no time
    out = {"dir": str(d / "folder.yaml"), "big": str(big), "d": str(d)}
    out["bomb_shape"] = _write(d, "bomb_shape.yaml", f"name: t\ninputs:\n  x: {{shape: {BOMB}}}\n"
                                                     "layers:\n  - {name: r, op: relu}\n")
    out["bomb_params"] = _write(d, "bomb_params.yaml", "name: t\ninputs:\n  x: {shape: [8]}\nblocks:\n  b:\n"
                                                       f"    params: {{w: {BOMB}}}\n    layers:\n"
                                                       "      - {name: r, op: relu}\nlayers:\n  - {use: b, name: u}\n")
    out["bigint"] = _write(d, "bigint.yaml", "name: t\ninputs:\n  x: {shape: [8]}\nlayers:\n"
                                             f"  - {{name: l, op: linear, features: {'9' * 400}}}\n")
    out["bigshape"] = _write(d, "bigshape.yaml", f"name: t\ninputs:\n  x: {{shape: [{'9' * 320}]}}\n"
                                                 "layers:\n  - {name: r, op: relu}\n")
    out["huge_tensor"] = _write(d, "huge_tensor.yaml", "name: t\ninputs:\n  x: {shape: [2147483648, 2147483648]}\n"
                                                       "layers:\n  - {name: r, op: relu}\n")
    out["latin1"] = _write(d, "latin1.yaml", b"name: caf\xe9\n")
    out["latin1_json"] = _write(d, "latin1.json", b'{"format": "\xff"}')
    out["slow_link"] = _machine(d, "slow.yaml", "bandwidth_gb_per_s: 300", "bandwidth_gb_per_s: 1.0e-300")
    out["neg_latency"] = _machine(d, "neglat.yaml", "latency_us: 2 ", "latency_us: -3 ")
    out["peak_text"] = _machine(d, "peak.yaml", "float32: 19.5 ", "float32: 1e30 ")
    out["peak_huge"] = _machine(d, "peakhuge.yaml", "float32: 19.5 ", "float32: 2.0e+6 ")
    out["nan_memory"] = _machine(d, "nanmem.yaml", "memory_gib: 80 ", "memory_gib: .nan ")
    return out


@pytest.fixture(scope="module")
def plans(files) -> dict[str, str]:
    d = Path(files["d"])
    out = {}
    for name, args in (("p64", ["lenet5", "--devices", "64"]), ("p4json", ["lenet5", "--devices", "4"])):
        path = str(d / (name + (".json" if name.endswith("json") else ".yaml")))
        result = runner.invoke(app, ["plan", *args, "--out", path])
        assert result.exit_code == 0, result.output
        out[name] = path
    text = Path(out["p64"]).read_text()
    out["cut_top"] = _write(d, "cut_top.yaml", text[:300])
    out["cut_layers"] = _write(d, "cut_layers.yaml", "\n".join(text.splitlines()[:100]) + "\n")
    out["cut_json"] = _write(d, "cut.json", Path(out["p4json"]).read_text()[:700])
    out["no_layers"] = _write(d, "no_layers.yaml", text[:text.index("\nlayers:") + 1])  # the key deleted
    out["on_local"] = _write(d, "on_local.yaml", text.replace("machine: dgx-a100", "machine: local"))
    out["bogus_algo"] = _write(d, "bogus_algo.yaml", text.replace("algorithm: direct", "algorithm: bogus", 1))
    out["precision_edited"] = _write(d, "precision_edited.yaml", text.replace("precision: fp32", "precision: bf16"))
    first = text.index("- name: ", text.index("\nlayers:"))  # the first layer's entry, listed again after the last
    entry = text[first:text.index("- name: ", first + 1)]
    out["twice"] = _write(d, "twice.yaml", text.rstrip("\n") + "\n" + entry)
    out["renamed"] = _write(d, "renamed.yaml", text.replace("- name: conv1\n", "- name: convX\n", 1))
    out["too_many"] = _write(d, "too_many.yaml", text.replace("devices: 64\n", "devices: 2147483648\n", 1))
    out["seq_on_cnn"] = _write(d, "seq_on_cnn.yaml", text + "seq: 16\n")
    return out


def _check(code: int, output: str, seconds: float, words: str) -> None:
    lines = [line for line in output.splitlines() if line.strip()]
    assert seconds < BOUND_S, f"took {seconds:.1f} s: {output[-500:]}"
    assert code == 2, output[-2000:]
    assert 1 <= len(lines) <= 6, output[-2000:]
    assert "Traceback" not in output and "internal error" not in output, output[-2000:]
    assert re.search(words, output), f"{words!r} not in: {output}"


def _in_process(args: list[str], words: str) -> None:
    start = time.monotonic()
    result = runner.invoke(app, args)
    _check(result.exit_code, result.output, time.monotonic() - start, words)


def _in_a_process(args: list[str], words: str) -> None:
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    try:
        proc = subprocess.run([sys.executable, "-m", "dnnplan", *args], capture_output=True, text=True, env=env,
                              timeout=BOUND_S + 10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dnnplan {' '.join(args)} ran past {BOUND_S + 10:.0f} s")
    _check(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, words)


ONCE_HUNG = [
    (["info", "{bomb_shape}"], "aliases repeat more than"),
    (["info", "{bomb_params}"], "aliases repeat more than"),
    (["info", "{big}"], "at most 8 MiB"),
    (["plan", "lenet5", "--machine", "{big}"], "at most 8 MiB"),
    (["plan", "resnet50", "--devices", "99999999999999999999"], "--devices must be a whole number from 1 to"),
    (["plan", "lenet5", "--sweep", "1,2,99999999999999"], "--sweep must be whole numbers from 1 to"),
]

REFUSED = [
    # files that are not what they claim
    (["info", "{dir}"], "is a directory, not a network spec file"),
    (["info", "{latin1}"], r"latin1.yaml:1: is not UTF-8 text \(byte 0xe9"),
    (["plan", "lenet5", "--machine", "local", "--profile", "{latin1_json}"], "is not UTF-8 text"),
    (["plan", "lenet5", "--machine", "local", "--profile", "{dir}"], "is a directory, not a profile table"),
    (["plan", "lenet5", "--machine", "{dir}"], "is a directory, not a machine file"),
    (["plan", "lenet5", "--machine", "{latin1}"], "is not UTF-8 text"),
    (["execute", "{dir}", "-n", "2"], r"is a directory, not a plan file \(give the path of the plan file inside it\)"),
    (["execute", "{latin1}", "-n", "2"], "is not UTF-8 text"),
    # numbers beyond any machine
    (["info", "{bigint}"], r"field 'features': must be at most 2\^31.*about 401 digits"),
    (["info", "{bigshape}"], r"inputs.x.shape.*about 321 digits"),
    (["info", "{huge_tensor}"], r"more than 2\^48 elements"),
    (["plan", "lenet5", "--devices", "16777217"], "--devices must be a whole number from 1 to 1,048,576"),
    (["plan", "lenet5", "--batch", "99999999999999999999999"], "--batch must be a whole number"),
    (["plan", "lenet5", "--memory", "nan"], "--memory must be from"),
    (["plan", "lenet5", "--memory", "inf"], "--memory must be from"),
    (["plan", "lenet5", "--gap", "-1"], "--gap must be from 0 to 1"),
    (["plan", "lenet5", "--gap", "nan"], "--gap must be from 0 to 1"),
    (["plan", "lenet5", "--time-limit", "nan"], "--time-limit must be from"),
    (["profile", "gemm", "--sizes", "1000000", "--out", "{d}/t.json"], "--sizes must list whole numbers"),
    (["profile", "lenet5", "--max-seconds", "nan", "--out", "{d}/t.json"], "--max-seconds must be from"),
    (["validate", "lenet5", "-n", "2", "--timeout", "nan"], "--timeout must be from"),
    (["execute", "{p64}", "-n", "2", "--steps", "0"], "--steps must be a whole number"),
    (["plan", "lenet5", "--sweep", ",".join(str(i) for i in range(1, 100))], "at most 64 are taken"),
    (["profile", "lenet5", "-p", "1,,2", "--out", "{d}/t.json"], r"--devices '1,,2' has an empty item \(write "
                                                                 r"--devices 1,2\)"),
    (["predict", "lenet5", "--devices", "4", "--strategy", "N=99999999999999999999999"], "does not divide 4 devices"),
    (["profile", "lenet5", "--algorithms", "nope", "--out", "{d}/t.json"], "unknown convolution algorithm 'nope'"),
    (["profile-comm", "--ranks", "9999999"], "--ranks must be a whole number"),
    # sizes too few to fit alpha, beta and gamma: refused before any rank starts (a one-point fit
    # priced every size from it; below 8 bytes the ranks failed, blaming the MPI install)
    (["profile-comm", "--max-bytes", "4", "--out", "{d}/c.json"], r"--max-bytes 4: .* a fit needs at least 3 "
                                                                 r"\(give --max-bytes 32 or more\)"),
    (["profile-comm", "--precision", "bf16", "--out", "{d}/c.json"], r"--precision bf16 names a GPU's table; the "
                                                                    r"numpy backend's collectives"),
    (["profile-comm", "--sizes", "8,64", "--out", "{d}/c.json"], r"--sizes 8,64: a fit of alpha, beta and gamma "
                                                                r"needs at least 3 message sizes"),
    (["info", "/dev/zero"], "is a character device, not a network spec file"),  # refused before it is read
    # machine files out of physics
    (["plan", "lenet5", "--machine", "{slow_link}"], r"intra.bandwidth_gb_per_s.*1 MB/s to 100 TB/s"),
    (["plan", "lenet5", "--machine", "{neg_latency}"], r"intra.latency_us.*1 ns to 1 s"),
    (["plan", "lenet5", "--machine", "{peak_text}"], "YAML reads '1e30' as text"),
    (["plan", "lenet5", "--machine", "{peak_huge}"], r"10\^18 FLOP/s"),
    (["plan", "lenet5", "--machine", "{nan_memory}"], r"device.memory_gib.*not a plausible value"),
    # plans: the wrong file, another machine, cut short
    (["execute", str(ZOO / "lenet5.yaml"), "-n", "2"],
     r"this is a network spec, not a plan \(make a plan of it with `dnnplan plan .*--out plan.yaml`"),
    (["execute", str(ROOT / "profiler" / "profiles" / "h100-bf16.json"), "-n", "2"],
     r"this is a profile table \(dnnplan profile's\), not a plan \(give it as --profile .*h100-bf16.json"),
    (["execute", "{on_local}", "-n", "2"], r"the plan is for 64 devices, but machine 'local' has \d+ \(plan again"),
    (["predict", "{on_local}"], r"the plan is for 64 devices, but machine 'local' has"),
    (["execute", "{p64}", "-n", "4"], "the plan is for 64 devices, not --ranks 4"),
    (["plan", "lenet5", "--devices", "64", "--machine", "local"], r"--devices \d+\) or pick a larger --machine"),
    (["execute", "{cut_top}", "-n", "2"], r"cut_top.yaml:\d+: the plan ends early .*last complete line is \d+ "
                                          r"\(make it again with `dnnplan plan lenet5 --devices 64 --batch 2048 --machine dgx-a100 --out \S*cut_top.yaml "
                                          r"--force`"),  # the file is there: replacing it takes --force
    (["predict", "{cut_layers}"], r"the plan ends after layer '\w+', \d+ of the network's \d+ layers short"),
    (["predict", "{cut_json}"], r"cut.json:\d+: the plan ends early"),
    (["predict", "{no_layers}"], r"no_layers.yaml:\d+: the plan ends early \(was it cut short\?\); it has no 'layers'"),
    (["predict", "{precision_edited}"], r"field 'precision': the plan was made for precision fp32, and its "
                                        r"'precision' now says bf16"),
    (["predict", "{too_many}"], r"too_many.yaml, field 'devices': 2147483648 devices is more than dnnplan plans for"),
    (["predict", "{seq_on_cnn}"], r"seq_on_cnn.yaml, field 'seq': 'seq' 16: lenet5 takes no sequence of tokens"),
    (["predict", "{twice}"], r"twice.yaml.*layer 'conv1' is listed twice \(keep one entry for it\)"),
    (["predict", "{renamed}"], r"renamed.yaml.*no entry for layer 'conv1', and names layer 'convX' the network lacks "
                               r"\(rename 'convX' back to 'conv1' if it was edited"),
    (["predict", "{bogus_algo}"], r"unknown convolution algorithm 'bogus' \(use one of direct, im2col, fft, "
                                  r"winograd"),
    # output files
    (["plan", "lenet5", "--out", "/nonexistent-dnnplan/dir/p.yaml"], "the folder /nonexistent-dnnplan/dir does not exist"),
    (["plan", "lenet5", "--out", "{p64}"], r"already exists \(pass --force to replace it\)"),
]


def _fill(args: list[str], names: dict[str, str]) -> list[str]:
    return [a.format(**names) for a in args]


@pytest.mark.parametrize("args, words", ONCE_HUNG, ids=[" ".join(a)[:50] for a, _ in ONCE_HUNG])
def test_what_once_hung_is_refused_in_time(files, args, words):
    _in_a_process(_fill(args, files), words)


@pytest.mark.parametrize("args, words", REFUSED, ids=[" ".join(a)[:50] for a, _ in REFUSED])
def test_mistaken_input_is_refused_in_one_line(files, plans, args, words):
    _in_process(_fill(args, {**files, **plans}), words)


def test_force_replaces_an_existing_plan(tmp_path):
    """What the file held before (another plan's YAML) is gone: it holds the new plan."""
    path = str(tmp_path / "p.yaml")
    assert runner.invoke(app, ["plan", "lenet5", "--devices", "8", "--out", path]).exit_code == 0
    result = runner.invoke(app, ["plan", "lenet5", "--devices", "64", "--out", path, "--force"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(open(path))["devices"] == 64  # the 8 devices' plan replaced


def test_a_million_devices_is_planned():
    """The answer for a million devices, fitting (its time against the --time-limit bound:
    `bench/planner/bench_plan_bound.py --networks resnet50 --counts 1000000`)."""
    result = runner.invoke(app, ["plan", "resnet50", "--devices", "1000000", "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    got = json.loads(result.stdout)
    assert (got["devices"], got["batch"]) == (1_000_000, 32_000_000) and got["step_s"] > 0 and got["memory_fits"]
