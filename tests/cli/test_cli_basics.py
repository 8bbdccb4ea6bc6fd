"""The CLI's surface: help for every command, JSON output, and the error boundary."""

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app

runner = CliRunner()


def commands():
    import typer.main
    return list(typer.main.get_command(app).commands)


def test_top_level_help_lists_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in commands():
        assert name in result.output


@pytest.mark.parametrize("name", commands())
def test_every_command_has_help(name):
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_info_json_matches_the_documented_schema():
    result = runner.invoke(app, ["info", "lenet5", "--batch", "8", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"network", "batch", "totals", "layers"}
    assert data["batch"] == 8
    assert set(data["totals"]) == {"params", "macs_per_sample", "flops_fwd", "flops_bwd", "activation_bytes"}
    assert data["totals"]["params"] == 61706
    assert data["layers"][0]["output_shape"] == [8, 6, 28, 28]
    assert {"name", "op", "output_shape", "params", "flops_fwd", "flops_bwd", "work", "depth",
            "activation_bytes"} == set(data["layers"][0])
    assert sum(l["params"] for l in data["layers"]) == data["totals"]["params"]


def test_unknown_network_is_one_line_exit_2():
    result = runner.invoke(app, ["info", "no-such-net"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "zoo networks" in result.output


def test_bad_batch_is_exit_2():
    result = runner.invoke(app, ["info", "lenet5", "--batch", "0"])
    assert result.exit_code == 2
    assert "--batch" in result.output


@pytest.mark.parametrize("name,default", [("plan", "32 samples a device"), ("plan", "20; a sweep's points share 30 s]"),
                                          ("execute", "the profile's, else cores"),
                                          ("profile", "this device's per-user cache")])
def test_help_shows_the_defaults_it_states(name, default):
    # rich reads "[default: ...]" as markup and drops it unless the bracket is escaped
    result = runner.invoke(app, [name, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    assert f"[default: {default}" in " ".join(result.output.split())


def test_machines_lists_the_current_gpus_with_their_nvlink_domain():
    result = runner.invoke(app, ["machines", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert {"dgx-h200", "dgx-b200", "gb200-nvl72", "mi300x"} <= set(rows)
    nvl72 = rows["gb200-nvl72"]
    assert (nvl72["devices_per_node"], nvl72["devices_per_nvlink_domain"]) == (4, 72)
    assert rows["dgx-b200"]["devices_per_nvlink_domain"] == 8
    assert rows["mi300x"]["memory_bytes"] == 192 * 2**30
    assert all(type(r["memory_bytes"]) is int for r in rows.values())  # whole bytes as a script reads them
    table = runner.invoke(app, ["machines"], env={"COLUMNS": "400"})
    assert "NVLink" in table.output and "gb200-nvl72" in table.output
    # bandwidths in GB/s as the datasheets and machine files give them (they read 279.40 GiB/s for 300)
    assert "GB/s" in table.output and "GiB/s" not in table.output and "279.40" not in table.output


def test_machines_named_gives_each_ones_every_figure(tmp_path):
    one = runner.invoke(app, ["machines", "dgx-h200"], env={"COLUMNS": "400"})
    assert one.exit_code == 0, one.output
    assert "bfloat16 989.5" in one.output and "memory 140.40 GiB at 4,800 GB/s" in one.output
    assert "cuda_cores 0.764" in one.output and "links between link domains: 5 µs latency, 50 GB/s" in one.output
    rows = json.loads(runner.invoke(app, ["machines", "dgx-h100", "mi300x", "--json"]).stdout)
    assert [r["name"] for r in rows] == ["dgx-h100", "mi300x"] and rows[1]["efficiency"]["tensor_16bit"] == 0.73
    bad = runner.invoke(app, ["machines", "nope"])
    assert bad.exit_code == 2 and "unknown machine 'nope'" in bad.output


def test_a_layout_predicted_over_the_memory_limit_says_it_does_not_fit():
    over = runner.invoke(app, ["predict", "gpt2", "-p", "1", "-b", "128"], env={"COLUMNS": "400"})
    assert over.exit_code == 0 and "(over the limit of 80.00 GiB: it does not fit)" in over.output
    under = runner.invoke(app, ["predict", "gpt2", "-p", "8"], env={"COLUMNS": "400"})
    assert under.exit_code == 0 and "(limit 80.00 GiB)" in under.output and "does not fit" not in under.output


def test_a_pipelined_layout_over_the_memory_limit_says_so_and_gives_its_mfu():
    """A pipelined prediction said neither (llama3-70b, tensor 8 x pipeline 2 on 16 A100s: 291 GiB a
    device printed on 80 GiB devices, exit 0, no word of it)."""
    args = ["predict", "llama3-70b", "-p", "16", "-b", "64", "--tensor", "8", "--pipeline", "2", "--micro-batches",
            "16", "--machine", "dgx-a100"]
    over = runner.invoke(app, args, env={"COLUMNS": "400"})
    text = " ".join(over.output.split())
    assert over.exit_code == 0 and "over the limit of 80.00 GiB: it does not fit" in text
    mfu = json.loads(runner.invoke(app, [*args, "--json"]).output)["mfu"]
    assert 0 < mfu < 1 and f"model FLOP utilisation {mfu:.1%}" in text
    fits = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--pipeline", "2", "--micro-batches", "4"],
                         env={"COLUMNS": "400"})
    assert fits.exit_code == 0 and "does not fit" not in fits.output and "model FLOP utilisation" in fits.output


def test_version_prints_the_installed_version():
    from importlib.metadata import version  # noqa: PLC0415 - the version the test compares

    got = runner.invoke(app, ["--version"])
    assert got.exit_code == 0 and got.output.strip() == f"dnnplan {version('dnnplan')}"
