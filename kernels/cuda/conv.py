"""Convolutions through cuDNN's graph API (nvidia-cudnn-frontend): ``conv_fprop``, ``conv_dgrad`` and
``conv_wgrad`` graphs on cupy memory, one engine family per algorithm name (kernels.cuda.engines).

For each (pass, shapes, format, precision, family) a graph is built once with the family's note
filter, and the family's engine is chosen once: the engine a profile table recorded for that call
(:func:`pin_engines`: the executor runs exactly what the profile timed), else the fastest of the
family's first ``TOP_K`` buildable plans in the heuristics' order, each timed with CUDA events
(one warm-up, three runs, the median). A family cuDNN has no engine for at a shape runs the
``im2col`` family's engine instead (the choice records it as ``ran``), so what a plan names always
runs and is timed as what it is. The choice, its engine's name and its workspace stay in
:data:`CHOICES`; :func:`last_choice` is the latest call's (the profiler records it).

A call given a ``site`` (a dict the caller keeps per call site: the executor's per-layer memo)
takes the **prepared path** from its second call on: the geometry, the engine's graph and plan
index, the handle (set to the stream once) and the workspace's pointer are resolved on the first
call and kept there (:class:`Prepared`), so a later call with the same operands (shapes, format,
precision, stream) only allocates its output and executes the plan; anything else prepares again.

Tensors are NCHW as the executor holds them (any C-contiguous NCHW array; cuDNN picks engines for
that layout, reformatting inside an engine where it must). Asymmetric padding (a spatially split
rank pads only at the global border) is applied as an explicit zero-padded copy, then a
convolution without padding: cuDNN's engines are not all defined for pre != post padding.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

from kernels.cuda import libs
from kernels.cuda import precision as process_precision
from kernels.cuda.cudnn_graphs import WORKSPACE_VERSION, cudnn_type, execute, handle, strides, workspace
from kernels.cuda.engines import TOP_K, NoteFilter, family_filter
from kernels.cuda.launch import fits, from_float32, i32, i64, run, spin
from kernels.cuda.precision import precision_of
from kernels.cuda.reduce import channel_sums
from networks.ops.conv_geometry import make_geom

PASSES = ("fwd", "bwd_data", "bwd_weights")


@dataclass
class Choice:
    """The engine a (call, family) runs: ``ran`` is the family it came from (``family`` itself, or
    ``im2col`` when the family had none), ``timed`` every candidate's (name, median seconds)."""

    family: str
    ran: str
    engine: str
    workspace_bytes: int
    index: int
    graph: object = field(repr=False)
    tensors: tuple = field(repr=False)
    timed: tuple = ()
    pinned: bool = False


#: choices by :func:`choice_key`
CHOICES: dict[tuple, Choice] = {}
#: engine names to run, by :func:`pin_key` (from a profile table's records)
PINS: dict[tuple, str] = {}
_LAST: list = [None]


def call_shape(x_shape, w_shape, stride, padding, dilation, groups) -> tuple[int, ...]:
    """(n, c, h, w, f, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, groups): the cost model's conv call
    shape without its bias flag (costmodel.calls.layer_calls SHAPE_FIELDS['conv2d.fwd'][:16])."""
    g = make_geom(x_shape, w_shape, stride, padding, dilation, groups)
    return (g.n, g.c, g.h, g.w, g.f, g.kh, g.kw, g.sh, g.sw, g.pt, g.pb, g.pl, g.pr, g.dh, g.dw, g.groups)


def pin_key(pass_: str, shape16: tuple, dtype_name: str, family: str, precision: str) -> tuple:
    return (pass_, tuple(int(s) for s in shape16), dtype_name, family, precision)


def pin_engines(records: dict) -> None:
    """Run these engines: {pin_key(...): engine name} (a profile table's, executor.backend.cuda)."""
    PINS.update(records)


def last_choice() -> Choice | None:
    return _LAST[0]


def _build(pass_: str, g, dtype_name: str, nf: NoteFilter):
    cudnn = libs.cudnn()
    io, flt = cudnn_type(dtype_name), cudnn.data_type.FLOAT
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=flt, compute_data_type=flt, handle=handle())
    x, w, y = (g.n, g.c, g.h, g.w), (g.f, g.c // g.groups, g.kh, g.kw), (g.n, g.f, g.ho, g.wo)
    geo = dict(pre_padding=[g.pt, g.pl], post_padding=[g.pb, g.pr], stride=[g.sh, g.sw], dilation=[g.dh, g.dw],
               compute_data_type=flt)

    def tensor(name, shape):
        return graph.tensor(name=name, dim=list(shape), stride=strides(shape), data_type=io)

    if pass_ == "fwd":
        a, b = tensor("X", x), tensor("W", w)
        out, shape = graph.conv_fprop(image=a, weight=b, **geo), y
    elif pass_ == "bwd_data":
        a, b = tensor("DY", y), tensor("W", w)
        out, shape = graph.conv_dgrad(loss=a, filter=b, **geo), x
    else:
        a, b = tensor("X", x), tensor("DY", y)
        out, shape = graph.conv_wgrad(image=a, loss=b, **geo), w
    out.set_output(True).set_dim(list(shape)).set_stride(strides(shape)).set_data_type(io)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    if nf.select:
        graph.select_numeric_notes([getattr(cudnn.numerical_note, n) for n in nf.select])
    if nf.deselect:
        graph.deselect_numeric_notes([getattr(cudnn.numerical_note, n) for n in nf.deselect])
    if nf.max_workspace_bytes is not None:
        graph.deselect_workspace_greater_than(nf.max_workspace_bytes)
    return graph, (a, b, out)


def _candidates(graph, pinned: str | None, top_k: int) -> list[tuple[int, str, int]]:
    """(index, name, workspace) of the plans built: the pinned one, else the first ``top_k``."""
    out = []
    for i in range(graph.get_execution_plan_count()):
        name = graph.get_plan_name_at_index(i)
        if pinned is not None and name != pinned:
            continue
        try:
            graph.build_plan_at_index(i)
        except Exception:  # noqa: BLE001 - barred by the family's filter, or not buildable here
            continue
        out.append((i, name, int(graph.get_workspace_size_plan_at_index(i))))
        if pinned is not None or len(out) >= top_k:
            break
    return out


def _time(graph, tensors: dict, index: int) -> float:
    cp = libs.cupy()
    execute(graph, tensors, index)
    samples = []
    for _ in range(3):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        spin(1e-4)  # the device busy while the host enqueues: the events time the engine alone
        start.record()
        execute(graph, tensors, index)
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(samples)


def _shape16(g) -> tuple:
    return (g.n, g.c, g.h, g.w, g.f, g.kh, g.kw, g.sh, g.sw, g.pt, g.pb, g.pl, g.pr, g.dh, g.dw, g.groups)


def _choose(pass_: str, g, dtype_name: str, family: str, arrays: tuple, called=None) -> Choice:
    """``called``: the geometry the kernel was called with (its pin's key) when ``g`` is that of an
    explicitly padded input."""
    precision = precision_of(dtype_name)
    shape16 = _shape16(called or g)
    pinned = PINS.get(pin_key(pass_, shape16, dtype_name, family, precision))
    for ran in dict.fromkeys((family, "im2col")):
        try:
            graph, tensors = _build(pass_, g, dtype_name, family_filter(ran, precision))
        except Exception:  # noqa: BLE001 - cuDNN lists no engine of this family for the graph
            continue
        cands = _candidates(graph, pinned if ran == family else None, TOP_K)
        if not cands and pinned is not None and ran == family:
            cands = _candidates(graph, None, TOP_K)  # the recorded engine is not offered here
        if not cands:
            continue
        bound = dict(zip(tensors, arrays))
        timed = tuple((name, _time(graph, bound, i)) for i, name, _ in cands) if len(cands) > 1 else ()
        best = min(range(len(cands)), key=lambda j: timed[j][1]) if timed else 0
        i, name, ws = cands[best]
        return Choice(family, ran, name, ws, i, graph, tensors, timed,
                      pinned is not None and name == pinned)
    raise RuntimeError(f"cuDNN offers no engine for convolution {pass_} {shape16} in {precision}")


def _pad_explicitly(x, g):
    """``x`` zero-padded by (pt, pb, pl, pr), and the geometry of a convolution without padding."""
    cp = libs.cupy()
    xp = cp.zeros((g.n, g.c, g.hp, g.wp), dtype=x.dtype)
    xp[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w] = x
    return xp, make_geom(xp.shape, (g.f, g.c // g.groups, g.kh, g.kw), (g.sh, g.sw), 0, (g.dh, g.dw), g.groups)


def _asymmetric(g) -> bool:
    return g.pt != g.pb or g.pl != g.pr


def _run(pass_: str, g, algo: str, a, b, out, called=None):
    key = (pass_, g, a.dtype.name, algo or "im2col", precision_of(a.dtype.name), libs.cupy().cuda.Device().id)
    choice = CHOICES.get(key)
    if choice is None:
        choice = CHOICES[key] = _choose(pass_, g, a.dtype.name, algo or "im2col", (a, b, out), called)
    _LAST[0] = choice
    execute(choice.graph, dict(zip(choice.tensors, (a, b, out))), choice.index)
    return out


@dataclass
class Prepared:
    """One call site's pass, resolved on its first call (module docstring): ``operands`` (shapes,
    format, precision, stream) say which calls it serves."""

    operands: tuple
    choice: Choice = field(repr=False)
    out_shape: tuple
    pad: tuple | None  # (padded input shape, top, left) when the input is padded explicitly first
    crop: tuple | None  # (top, left, h, w) of dx inside the padded one (backward-data)
    handle: int
    workspace_ptr: int
    workspace_version: int


def _operands(pass_: str, a, b_shape, called_shape, geometry: tuple, algo: str, out_shape) -> tuple:
    """What a prepared pass serves: equal operands, equal work (checked on every call: cheap)."""
    cp = libs.cupy()
    return (pass_, a.shape, tuple(b_shape), tuple(called_shape), out_shape, geometry, a.dtype.name, algo or "im2col",
            process_precision.current(), cp.cuda.get_current_stream().ptr)


def _prepare(site: dict, pass_: str, operands: tuple, g0, a, b, out_shape: tuple, algo: str) -> Prepared:
    """Resolve a call site's pass once: the geometry (explicit padding), the engine, the handle on
    this stream, the workspace."""
    cp = libs.cupy()
    g, pad, crop = g0, None, None
    if _asymmetric(g0):  # a convolution without padding over an explicitly padded input
        g = make_geom((g0.n, g0.c, g0.hp, g0.wp), (g0.f, g0.c // g0.groups, g0.kh, g0.kw), (g0.sh, g0.sw), 0,
                      (g0.dh, g0.dw), g0.groups)
        if pass_ == "bwd_data":  # its dx cropped back
            crop = (g0.pt, g0.pl, g0.h, g0.w)
        else:  # its input padded first
            pad = ((g0.n, g0.c, g0.hp, g0.wp), g0.pt, g0.pl)
    run_shape = {"fwd": (g.n, g.f, g.ho, g.wo), "bwd_data": (g.n, g.c, g.h, g.w)}.get(pass_, out_shape)
    arrays = (cp.zeros(pad[0], dtype=a.dtype) if pad else a, b, cp.empty(run_shape, dtype=a.dtype))
    key = (pass_, g, a.dtype.name, algo or "im2col", precision_of(a.dtype.name), cp.cuda.Device().id)
    choice = CHOICES.get(key)
    if choice is None:
        choice = CHOICES[key] = _choose(pass_, g, a.dtype.name, algo or "im2col", arrays, g0)
    ws = workspace(choice.workspace_bytes)
    site[pass_] = Prepared(operands, choice, tuple(run_shape), pad, crop, handle(), ws.data.ptr,
                           WORKSPACE_VERSION[0])
    return site[pass_]


def _site_pass(site: dict, pass_: str, a, b, b_shape, called_shape, geometry, algo, out_shape):
    """The prepared pass of this call site for these operands (made on a first or changed call)."""
    operands = _operands(pass_, a, b_shape, called_shape, geometry, algo, out_shape)
    prep = site.get(pass_)
    if prep is None or prep.operands != operands:
        g0 = make_geom(called_shape if pass_ == "bwd_data" else a.shape,
                       b_shape if pass_ != "bwd_weights" else out_shape, *geometry)
        prep = _prepare(site, pass_, operands, g0, a, b, out_shape, algo)
    if prep.workspace_version != WORKSPACE_VERSION[0]:  # another call grew the workspace: it moved
        prep.workspace_ptr = workspace(prep.choice.workspace_bytes).data.ptr
        prep.workspace_version = WORKSPACE_VERSION[0]
    return prep


def _execute_prepared(prep: Prepared, a, b):
    """The pass on ``a`` and ``b`` as prepared: the output allocated, the plan executed."""
    cp = libs.cupy()
    if prep.pad is not None:
        shape, top, left = prep.pad
        padded = cp.zeros(shape, dtype=a.dtype)
        padded[:, :, top:top + a.shape[2], left:left + a.shape[3]] = a
        a = padded
    out = cp.empty(prep.out_shape, dtype=a.dtype)
    c = prep.choice
    c.graph.execute_plan_at_index({c.tensors[0]: a.data.ptr, c.tensors[1]: b.data.ptr, c.tensors[2]: out.data.ptr},
                                  prep.workspace_ptr, c.index, handle=prep.handle)
    _LAST[0] = c
    if prep.crop is not None:
        top, left, h, w = prep.crop
        out = cp.ascontiguousarray(out[:, :, top:top + h, left:left + w])
    return out


def conv2d_forward(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, algo="im2col",
                   *, trace=None, site=None, fallback: Callable):
    if not fits(x, w):
        return fallback(x, w, b, stride, padding, dilation, groups, algo)
    if site is not None:
        prep = _site_pass(site, "fwd", x, w, w.shape, x.shape, (stride, padding, dilation, groups), algo, None)
        y = _execute_prepared(prep, x, w)
        if b is not None:
            _add_bias(y, b)
        return y
    cp = libs.cupy()
    g = g0 = make_geom(x.shape, w.shape, stride, padding, dilation, groups)
    if _asymmetric(g):
        x, g = _pad_explicitly(x, g)
    y = _run("fwd", g, algo, x, w, cp.empty((g.n, g.f, g.ho, g.wo), dtype=x.dtype), g0)
    if b is not None:
        _add_bias(y, b)
    return y


def _add_bias(y, b) -> None:
    bias = libs.cupy().ascontiguousarray(b.astype(y.dtype, copy=False))
    run("bias_nchw", y.dtype.name, y.size, (y, bias, i64(y.size), i64(y.shape[2] * y.shape[3]), i32(y.shape[1])))


def conv2d_backward_data(dy, w, x_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                         algo="im2col", *, trace=None, site=None, fallback: Callable):
    if not fits(dy, w):
        return fallback(dy, w, x_shape, stride, padding, dilation, groups, algo)
    if site is not None:
        prep = _site_pass(site, "bwd_data", dy, w, w.shape, tuple(x_shape), (stride, padding, dilation, groups),
                          algo, None)
        return _execute_prepared(prep, dy, w)
    cp = libs.cupy()
    g0 = make_geom(x_shape, w.shape, stride, padding, dilation, groups)
    g = make_geom((g0.n, g0.c, g0.hp, g0.wp), w.shape, stride, 0, dilation, groups) if _asymmetric(g0) else g0
    dx = _run("bwd_data", g, algo, dy, w, cp.empty((g.n, g.c, g.h, g.w), dtype=dy.dtype), g0)
    if g is not g0:
        dx = cp.ascontiguousarray(dx[:, :, g0.pt:g0.pt + g0.h, g0.pl:g0.pl + g0.w])
    return dx


def conv2d_backward_weights(dy, x, w_shape, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                            algo="im2col", with_bias=False, *, trace=None, site=None, fallback: Callable):
    if not fits(dy, x):
        return fallback(dy, x, w_shape, stride, padding, dilation, groups, algo, with_bias)
    cp = libs.cupy()
    if site is not None:
        prep = _site_pass(site, "bwd_weights", x, dy, dy.shape, x.shape, (stride, padding, dilation, groups), algo,
                          tuple(w_shape))
        dw = _execute_prepared(prep, x, dy)
        db = from_float32(channel_sums(dy)[0].astype(cp.float32), dy.dtype) if with_bias else None
        return dw, db
    g = g0 = make_geom(x.shape, w_shape, stride, padding, dilation, groups)
    if _asymmetric(g):
        x, g = _pad_explicitly(x, g)
    dw = _run("bwd_weights", g, algo, x, dy, cp.empty(tuple(w_shape), dtype=dy.dtype), g0)
    db = from_float32(channel_sums(dy)[0].astype(cp.float32), dy.dtype) if with_bias else None
    return dw, db
