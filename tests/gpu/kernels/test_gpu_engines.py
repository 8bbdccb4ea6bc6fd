"""cuDNN's engines as dnnplan's convolution algorithms (kernels.cuda.engines) and how the GPU
convolution drives the frontend to choose one (kernels.cuda.conv), on the CPU.

The engine fixture is the H100 probe's (../shared/gpu-probe/RESULTS.md): each engine with the
notes its appearance there implies (the probe's strict-fp32 run deselected TENSOR_CORE and
DOWN_CONVERT_INPUTS and kept eng0, eng1, eng3, eng28 and eng70; eng58, eng62 and eng67 appeared only
with tensor cores allowed), plus a Winograd engine with the notes a cuDNN frontend log printed for
it and an FFT engine carrying the FFT note cuDNN documents (its id made up). The frontend is
tests/support/doubles/fake_cudnn.py, which reproduces the frontend's note filters from its source; these
tests prove the family rules and dnnplan's calls, not which engines a GPU offers
(bench/gpu/engines_probe.py lists those on a GPU).
"""

from __future__ import annotations

import sys

import pytest

from kernels.cuda import conv, engines, libs, precision
from kernels.cuda.engines import FAMILIES, NoteFilter, families_of, family_filter, parse_plan_name, precision_filter
from networks.ops.conv_geometry import make_geom

from tests.support.doubles.fake_cudnn import fake_module
from tests.support.paths import BENCH

PROBE = [  # (name, numerical notes, workspace bytes), in a heuristics-like order
    ("eng67_k2=0_k13=0_k18=0_k25=0_k27=1_k28=2", {"TENSOR_CORE"}, 8389023),
    ("eng67_k2=3_k13=0_k18=0_k25=0_k27=1_k28=2", {"TENSOR_CORE"}, 0),
    ("eng62_k2=0_k13=1_k18=0_k25=1_k27=1_k28=2", {"TENSOR_CORE"}, 0),
    ("eng58_k25=0", {"TENSOR_CORE"}, 0),
    ("eng3_k11=2", set(), 219152400),
    ("eng70_k2=4_k18=0", set(), 28049424),
    ("eng1", set(), 28058640),
    ("eng28", set(), 0),
    ("eng0", set(), 0),
]
DOCUMENTED = [
    ("ConvFwd_Add_Add_eng15_k5=1_k6=0_k7=1_k10=1", {"WINOGRAD", "WINOGRAD_TILE_4x4"}, 895504),
    ("eng901", {"FFT"}, 400_000_000),
]
ENGINES = PROBE + DOCUMENTED
FP32_PROBE = {"eng3_k11=2", "eng70_k2=4_k18=0", "eng1", "eng28", "eng0"}


def test_families_follow_the_notes():
    assert families_of({"FFT"}, 10, "tf32") == ("fft",)
    assert families_of({"WINOGRAD", "WINOGRAD_TILE_4x4"}, 10, "tf32") == ("winograd",)
    assert families_of(set(), 10, "fp32") == ("im2col",)
    assert families_of(set(), 0, "fp32") == ("im2col", "direct")
    assert families_of({"TENSOR_CORE"}, 0, "fp32") == ()  # strict float32 refuses tensor cores
    assert families_of({"TENSOR_CORE"}, 0, "bf16") == ("im2col", "direct")
    assert families_of({"REDUCED_PRECISION_REDUCTION"}, 0, "bf16") == ()  # 16 bits accumulate in float32
    with pytest.raises(ValueError):
        family_filter("gemm", "fp32")
    with pytest.raises(ValueError):
        precision_filter("fp8")


def test_the_probes_strict_float32_engines_are_the_ones_fp32_keeps():
    kept = {name for name, notes, ws in PROBE if families_of(notes, ws, "fp32")}
    assert kept == FP32_PROBE
    assert {name for name, notes, ws in PROBE if families_of(notes, ws, "tf32")} == {n for n, _, _ in PROBE}


@pytest.mark.parametrize("prec", precision.PRECISIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_frontends_filters_keep_exactly_the_family(family, prec):
    """The filter calls on a graph (the frontend's rule, tests/support/doubles/fake_cudnn.py) keep what
    :func:`families_of` assigns to the family."""
    graphs, calls = [], []
    g = fake_module(ENGINES, graphs, calls).pygraph()
    nf = family_filter(family, prec)
    if nf.select:
        g.select_numeric_notes(nf.select)
    if nf.deselect:
        g.deselect_numeric_notes(nf.deselect)
    if nf.max_workspace_bytes is not None:
        g.deselect_workspace_greater_than(nf.max_workspace_bytes)
    built = set()
    for i in range(g.get_execution_plan_count()):
        try:
            g.build_plan_at_index(i)
            built.add(g.get_plan_name_at_index(i))
        except RuntimeError:
            pass
    assert built == {name for name, notes, ws in ENGINES if family in families_of(notes, ws, prec)}


def test_plan_names_parse():
    assert parse_plan_name("eng67_k2=0_k13=0_k18=0_k25=0_k27=1_k28=2") == (67, {2: 0, 13: 0, 18: 0, 25: 0, 27: 1, 28: 2})
    assert parse_plan_name("eng3_k11=2") == (3, {11: 2})
    assert parse_plan_name("eng0") == (0, {})
    assert parse_plan_name("ConvFwd_Add_Add_eng15_k5=1_k6=0_k7=1_k10=1")[0] == 15
    with pytest.raises(ValueError):
        parse_plan_name("cudnn")


def test_note_filter_rule():
    nf = NoteFilter(("FFT",), ("TENSOR_CORE",), 100)
    assert nf.keeps({"FFT"}, 100) and not nf.keeps({"FFT"}, 101)
    assert not nf.keeps({"FFT", "TENSOR_CORE"}) and not nf.keeps(set())


@pytest.fixture
def frontend(monkeypatch):
    """kernels.cuda.conv on the fake frontend; timing by engine name (seconds in ``speed``)."""
    graphs, calls, speed = [], [], {}
    monkeypatch.setattr(libs, "cudnn", lambda: fake_module(ENGINES, graphs, calls))
    monkeypatch.setattr(conv, "handle", lambda: 0)
    monkeypatch.setattr(conv, "_time", lambda g, tensors, i: speed.get(g.get_plan_name_at_index(i), 1.0))
    monkeypatch.setattr(conv, "PINS", {})
    precision.set_precision("fp32")
    yield graphs, calls, speed
    precision.set_precision("fp32")


def _geom(pad=1):
    return make_geom((8, 64, 14, 14), (64, 64, 3, 3), 1, pad, 1, 1)


def test_a_choice_is_the_fastest_of_the_heuristics_first_k(frontend):
    graphs, calls, speed = frontend
    precision.set_precision("tf32")
    speed.update({"eng67_k2=0_k13=0_k18=0_k25=0_k27=1_k28=2": 3.0, "eng67_k2=3_k13=0_k18=0_k25=0_k27=1_k28=2": 2.0,
                  "eng62_k2=0_k13=1_k18=0_k25=1_k27=1_k28=2": 1.0, "eng58_k25=0": 5.0, "eng0": 0.1})
    got = conv._choose("fwd", _geom(), "float32", "im2col", (None, None, None))
    assert got.engine == "eng62_k2=0_k13=1_k18=0_k25=1_k27=1_k28=2" and got.ran == "im2col"
    assert len(got.timed) == engines.TOP_K  # eng0, fastest but fifth, is pruned: the design's trade
    assert ("create_execution_plans", {"modes": ["A", "FALLBACK"]}) in calls


def test_a_pinned_engine_is_the_one_that_runs(frontend):
    graphs, calls, speed = frontend
    g = _geom()
    key = conv.pin_key("fwd", conv.call_shape((8, 64, 14, 14), (64, 64, 3, 3), 1, 1, 1, 1), "float32", "im2col", "fp32")
    conv.pin_engines({key: "eng28"})
    got = conv._choose("fwd", g, "float32", "im2col", (None, None, None))
    assert (got.engine, got.pinned, got.timed) == ("eng28", True, ())


def test_a_family_without_engines_runs_the_gemm_family(frontend, monkeypatch):
    graphs, calls, speed = frontend
    monkeypatch.setattr(libs, "cudnn", lambda: fake_module(PROBE, graphs, calls))  # no FFT engine at all
    got = conv._choose("bwd_weights", _geom(), "float32", "fft", (None, None, None))
    assert got.family == "fft" and got.ran == "im2col" and got.engine in FP32_PROBE


def test_the_graph_is_the_layers_convolution(frontend):
    graphs, calls, _ = frontend
    g = make_geom((2, 6, 9, 7), (4, 3, 3, 3), (2, 1), (1, 1, 0, 0), (1, 2), 2)
    conv._build("bwd_data", g, "bfloat16", family_filter("fft", "bf16"))
    op = next(kw for name, kw in calls if name == "conv_dgrad")
    assert op["pre_padding"] == [1, 0] and op["post_padding"] == [1, 0]
    assert op["stride"] == [2, 1] and op["dilation"] == [1, 2]
    dims = [kw["dim"] for name, kw in calls if name == "tensor"]
    assert dims == [[2, 4, g.ho, g.wo], [4, 3, 3, 3]]  # dy, then the grouped filter (F, C/groups, KH, KW)
    assert ("select_numeric_notes", {"notes": ["FFT"]}) in calls
    assert ("deselect_numeric_notes", {"notes": ["REDUCED_PRECISION_REDUCTION"]}) in calls
    assert calls[0][1]["io_data_type"] == "BFLOAT16"


def test_call_shape_is_the_cost_models_conv_shape():
    """Pins are keyed by the cost model's conv call shape without its bias flag, so a profile
    table's records reach the kernel (executor.backend.select.engine_pins)."""
    from costmodel.calls.kernel_call import SHAPE_FIELDS  # noqa: PLC0415 - test-local
    assert len(conv.call_shape((8, 64, 14, 14), (64, 64, 3, 3), 1, 1, 1, 1)) == len(SHAPE_FIELDS["conv2d.fwd"]) - 1
    assert conv.call_shape((8, 64, 14, 14), (32, 32, 3, 3), 2, (1, 0, 1, 0), 1, 2) == \
        (8, 64, 14, 14, 32, 3, 3, 2, 2, 1, 0, 1, 0, 1, 1, 2)


def test_an_explicitly_padded_convolution_keeps_the_pin_of_the_call(frontend):
    """Asymmetric padding runs as a padded copy and a convolution without padding; the engine pinned
    for the call as made (the profile's key) still runs."""
    g0 = make_geom((8, 64, 14, 14), (64, 64, 3, 3), 1, (1, 0, 1, 0), 1, 1)
    padded = make_geom((8, 64, g0.hp, g0.wp), (64, 64, 3, 3), 1, 0, 1, 1)
    key = conv.pin_key("fwd", conv.call_shape((8, 64, 14, 14), (64, 64, 3, 3), 1, (1, 0, 1, 0), 1, 1), "float32",
                       "im2col", "fp32")
    conv.pin_engines({key: "eng1"})
    assert conv._choose("fwd", padded, "float32", "im2col", (None, None, None), g0).engine == "eng1"


def test_the_graph_check_script_drives_the_kernels_builders(frontend):
    """bench/gpu/cudnn_validate.py's GPU mode on the fake frontend: the conv line names the
    engine configs and the family's first TOP_K that build."""
    sys.path.insert(0, str(BENCH / "gpu"))
    import cudnn_validate  # noqa: PLC0415 - a script beside the benchmarks

    line = cudnn_validate._conv_line("fwd", cudnn_validate.CONVS[0], "fp32", "im2col", True)
    assert line.startswith(f"{len(ENGINES)} engine configs") and "eng" in line
