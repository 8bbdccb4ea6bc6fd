"""The GPU proof's rows (bench/gpu/prove_rows.py): each figure read off the commands' JSON as they
write it, None where nothing was measured, and the issue's targets judged on them. The script's
plumbing runs end to end on the host with ``bash bench/gpu/prove.sh --dry-run`` (minutes; not in
the suite)."""

from __future__ import annotations

import sys

from tests.support.paths import BENCH, ROOT

sys.path.insert(0, str(BENCH / "gpu"))

from prove_rows import (ROW_KEYS, ROWS, Row, breakdown_args, card_of, from_execute, from_validate,  # noqa: E402
                        layer_median_error, torch_step, verdicts)

EXECUTE = {"plan": "p.yaml", "ranks": 1, "steps": 10,
           "measured": {"step_s": 0.080, "layers": []}, "predicted": {"step_s": 0.075, "layers": []},
           "error": {"step_rel": 0.0667, "layers": [{"name": "a", "total": 0.1}, {"name": "b", "total": -0.3},
                                                     {"name": "c", "total": None}, {"name": "d", "total": 0.05}]},
           "check": None, "predicted_peak_bytes": 100, "measured_peak_bytes": 108, "memory_rel": 0.08}
VALIDATE = {"network": "alexnet", "ranks": 2, "batch": 32,
            "plans": [{"name": "planner", "predicted_step_s": 0.01, "measured_step_s": 0.012, "layer_median_abs_rel": 0.2,
                       "memory_rel": -0.02, "check": {"passed": True, "worst_rel_error": 1e-6, "worst_tensor": "x"}},
                      {"name": "filter", "predicted_step_s": 0.02, "measured_step_s": 0.03, "layer_median_abs_rel": None,
                       "memory_rel": None, "check": None}]}
TORCH = {"rows": [{"name": "resnet50-b64-tf32-sgd", "median_s": 0.07}, {"name": "vgg16-b64-tf32-sgd", "error": "OOM"}]}


def test_a_row_from_an_execute_run_has_the_issues_keys_and_no_guess():
    row = from_execute(ROWS[0], EXECUTE, torch_step(TORCH, ROWS[0].torch_row), "H100", "abc1234", "2026-11-27")
    assert tuple(row) == ROW_KEYS
    assert (row["predicted_s"], row["measured_s"], row["torch_s"]) == (0.075, 0.080, 0.07)
    assert row["layer_median_error"] == 0.1 and row["memory_error"] == 0.08 and row["check_passed"] is None
    assert torch_step(TORCH, "vgg16-b64-tf32-sgd") is None and torch_step(None, "x") is None
    assert layer_median_error({"error": {"layers": []}}) is None


def test_rows_from_a_validate_run_one_per_plan():
    rows = from_validate(Row("alexnet", 32, "fp32", ""), VALIDATE, "H100", "abc", "2026-11-27")
    assert [tuple(r) for r in rows] == [ROW_KEYS, ROW_KEYS]
    assert rows[0]["check_passed"] is True and rows[1]["check_passed"] is None and rows[0]["ranks"] == 2


def test_the_targets_are_judged_only_on_what_was_measured():
    row = from_execute(ROWS[0], EXECUTE, 0.07, "H100", "abc", "d")
    got = verdicts(row)
    assert got == {"step_error_under_10pct": True, "layer_median_under_15pct": True, "memory_within_10pct": True,
                   "within_1_25x_torch": True}
    missing = verdicts({**row, "torch_s": None, "memory_error": None})
    assert missing["within_1_25x_torch"] is None and missing["memory_within_10pct"] is None


def test_the_rows_are_the_issues():
    assert [(r.network, r.batch, r.precision) for r in ROWS] == [
        ("resnet50", 64, "tf32"), ("gpt2", 8, "bf16"), ("resnet50", 64, "bf16"), ("vgg16", 64, "tf32"),
        ("llama3-8b-block", 1, "bf16")]
    # the block's file is what the commands are given, and it plans on the card's machine
    (llama,) = [r for r in ROWS if r.spec]
    assert (ROOT / llama.source).is_file() and llama.name == "llama3-8b-block-b1-bf16"


def test_a_row_says_how_its_steps_ran():
    graphed = {**EXECUTE, "steps_mode": {"mode": "graphs"}}
    refused = {**EXECUTE, "steps_mode": {"mode": "eager", "reason": "host-staged collectives"}}
    assert [from_execute(ROWS[0], e, None, "H200", "abc", "2026-12-04")["mode"]
            for e in (graphed, refused, EXECUTE)] == ["graphs", "eager", "eager"]


def test_the_card_names_its_tables_and_machine():
    assert card_of("NVIDIA H200") == ("h200", "dgx-h200")
    assert card_of("NVIDIA H100 80GB HBM3") == ("h100", "dgx-h100")
    assert card_of("NVIDIA B200") == ("b200", "dgx-b200")
    assert card_of("NVIDIA RTX 6000 Ada Generation") == ("rtx-6000-ada-generation", "dgx-h100")
    assert card_of("") == ("gpu", "dgx-h100")


def test_each_row_has_its_pytorch_twin():
    text = (BENCH / "gpu" / "torch_steps.py").read_text()
    for row in ROWS:
        assert f'("{row.torch_row}", "{row.network}", {row.batch}, "{row.precision}", "momentum"' in text, row


def test_a_stage_starts_only_when_its_limit_fits_what_is_left():
    import prove  # noqa: PLC0415 - the script beside prove_rows
    from prove_budget import RESERVE_S, Stage, admit, allot, grown  # noqa: PLC0415

    asked = prove.plan_stages(ROWS, set(), dry=False)
    # most important first; the two-rank check and the host's cost per op after the first two rows
    assert [st.name for st in asked][:7] == ["graphs", "tests", f"row {ROWS[0].name}", f"row {ROWS[1].name}", "two",
                                             "host", f"row {ROWS[2].name}"]
    row = asked[2]
    assert admit(row, row.limit_s + RESERVE_S) is None
    assert "did not fit" in admit(row, row.limit_s + RESERVE_S - 1)
    run, skipped = allot([Stage("a", 100), Stage("b", 400), Stage("c", 50)], {"c": ["torch"]})
    assert [st.name for st in run] == ["a", "b"] and dict(skipped)["c"].startswith("not installed: torch")
    # the tables take what the later stages leave, never less than their own limit
    later = [Stage("kernels", 60), Stage("engines", 60)]
    assert grown(Stage("shipped", 90), 400, later).limit_s == 400 - RESERVE_S - 120
    assert grown(Stage("shipped", 90), 200, later).limit_s == 90


def test_packages_are_checked_before_anything_runs():
    from prove_budget import Stage, missing_packages  # noqa: PLC0415

    stages = [Stage("rows", 10, ("numpy", "torch")), Stage("tests", 10, ("pytest", "numpy"))]
    asked = []
    got = missing_packages(stages, lambda name: asked.append(name) or name != "torch")
    assert got == {"rows": ["torch"]} and sorted(asked) == ["numpy", "pytest", "torch"]  # each looked up once


def test_the_script_carries_what_the_gpu_machine_lacks():
    """prove.sh's wheel list names the packages the proof imports that a GPU image may lack."""
    text = (BENCH / "gpu" / "prove.sh").read_text()
    for wheel in ("threadpoolctl==", "pytest==", "pytest-timeout==", "pluggy==", "iniconfig==",
                  "nvidia-cudnn-frontend=="):
        assert wheel in text, wheel


def test_without_pytest_timeout_the_gpu_tests_run_bounded_by_their_stage(tmp_path, monkeypatch):
    import prove  # noqa: PLC0415

    s = prove.Session(tmp_path, 100, False, "abc")
    ran = []
    monkeypatch.setattr(s, "run", lambda args, limit, what: ran.append(args) or (0, ""))
    s.timeout_plugin = False
    prove.gpu_tests(s)
    s.timeout_plugin = True
    prove.gpu_tests(s)
    assert "--timeout" not in ran[0] and "--timeout" in ran[1]


def test_the_vgg_row_alone_has_its_kernels_listed_by_pytorchs_profiler():
    """PyTorch's VGG-16 step, whose convolutions run below the one fraction fitted on ResNet-50's,
    has its kernels listed (torch_steps.py --breakdown) when it is among the rows timed; no other row
    pays the profiler's steps, and a call without it passes nothing."""
    names = [row.torch_row for row in ROWS]
    assert breakdown_args(names) == ["--breakdown", "vgg16-b64-tf32-sgd"]
    assert breakdown_args(["resnet50-b64-tf32-sgd", "gpt2-b8-bf16"]) == []

