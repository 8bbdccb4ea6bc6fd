"""Every mistake in a network spec ends in one clean line naming the file, the layer and the field.

Each file under tests/assets/bad_specs/ starts with comment lines that say what the error must say:
``# expect: <substring>``, ``# field: <field>`` (``none`` where the mistake is not in a field, e.g.
YAML syntax), and where known ``# layer: <name>`` and ``# line: <N>``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from networks.errors import DnnplanError
from networks.spec import parse_network
from dnnplan.cli import app

from tests.support.paths import ASSETS

CORPUS = ASSETS / "bad_specs"
CASES = sorted(CORPUS.glob("*.yaml"))
runner = CliRunner()


def header(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#\s*(expect|field|layer|line):\s*(.*?)\s*$", line)
        if not m:
            break
        out[m.group(1)] = m.group(2)
    return out


def test_the_corpus_is_big_enough_and_annotated():
    assert len(CASES) >= 30
    for path in CASES:
        h = header(path)
        assert "expect" in h and "field" in h, f"{path.name} lacks '# expect:' or '# field:'"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_parse_raises_one_clean_line(path: Path):
    h = header(path)
    source = str(path)
    with pytest.raises(DnnplanError) as info:
        parse_network(path.read_text(encoding="utf-8"), source=source)
    msg = str(info.value)
    assert "\n" not in msg and "\r" not in msg, msg
    assert h["expect"] in msg, msg
    assert source in msg, msg
    if h["field"] != "none":
        assert f"field '{h['field']}'" in msg, msg
        assert info.value.field == h["field"]
    if "layer" in h:
        assert f"layer '{h['layer']}'" in msg, msg
    if "line" in h:
        assert f"{source}:{h['line']}" in msg, msg


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_cli_exits_2_without_traceback(path: Path):
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "internal error" not in result.output
    assert header(path)["expect"] in " ".join(result.output.split())  # rich may wrap long lines
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_missing_file_exits_2(tmp_path: Path):
    result = runner.invoke(app, ["info", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert "no such network spec file" in result.output


def test_a_plan_file_where_a_network_goes_is_named_as_a_plan(tmp_path: Path):
    """`dnnplan plan --out` wrote it; given to `info` (or `plan`) it is a plan, not a spec with an
    unknown key 'version'."""
    plan = tmp_path / "lenet5-plan.yaml"
    assert runner.invoke(app, ["plan", "lenet5", "-p", "2", "--out", str(plan)]).exit_code == 0
    for args in (["info", str(plan)], ["plan", str(plan), "-p", "2"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert "a dnnplan plan (of lenet5), not a network spec" in result.output
        assert f"dnnplan predict {plan}" in result.output


def test_directory_exits_2(tmp_path: Path):
    result = runner.invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "internal error" not in result.output


def test_undecodable_file_exits_2(tmp_path: Path):
    bad = tmp_path / "binary.yaml"
    bad.write_bytes(b"name: \xff\xfe\x00\n")
    result = runner.invoke(app, ["info", str(bad)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and "internal error" not in result.output


def test_a_spec_that_lists_too_many_layers_says_so_not_its_repeat_counts(tmp_path):
    """More layers than dnnplan plans written out one by one (no block, no 'repeat'): the line names
    the layers and how to write them shorter, not a 'repeat' the file does not have."""
    from networks.spec_expand import MAX_ENTRIES  # noqa: PLC0415

    rows = "\n".join(f"  - {{name: l{i}, op: linear, features: 8}}" for i in range(MAX_ENTRIES + 1))
    path = tmp_path / "long.yaml"
    path.write_text(f"name: long\ninputs:\n  x: {{shape: [8]}}\nlayers:\n{rows}\n")
    with pytest.raises(DnnplanError) as err:
        parse_network(path.read_text(), str(path))
    assert err.value.field == "layers" and "repeat" not in err.value.bare and "'use'" in err.value.hint
