"""A stand-in for cuDNN's Python frontend (``import cudnn``, nvidia-cudnn-frontend 1.16.0), enough
for kernels.cuda.conv to build its graphs and choose engines on a computer without a GPU.

What it reproduces, from the frontend's source (include/cudnn_frontend/plans.h, v1.16.0): a graph
lists engine configs (here: a fixed list of (name, numerical notes, workspace)); each
``select_numeric_notes``/``deselect_numeric_notes`` call bars, note by note, the configs lacking /
having that note, OR-ed into what earlier calls barred (``filter_numeric_notes``);
``deselect_workspace_greater_than`` bars larger workspaces; ``build_plan_at_index`` fails for a
barred config (``check_support_at_index`` first); names, counts and workspaces are read per index.
It also records every call (tensors, the convolution's padding, stride, dilation; the handle made
and set to a stream; each execution of a plan, its workspace size asked).

What it does not do: run, time or pick anything as cuDNN would. Tests built on it prove how dnnplan
drives the frontend (which calls, which filters, which plan it keeps), not what cuDNN offers.
"""

from __future__ import annotations

from types import SimpleNamespace

NOTE_NAMES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "NONDETERMINISTIC",
              "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13", "STRICT_NAN_PROP")


#: The keyword arguments the real bindings take (pybind11 signatures of nvidia-cudnn-frontend 1.16.0,
#: ``help(cudnn.pygraph.conv_fprop)`` etc.; the convolutions' second overload, with pre/post padding)
KEYWORDS = {
    "pygraph": {"name", "io_data_type", "intermediate_data_type", "compute_data_type", "handle", "sm_count",
                "sm_version", "kernel_cache", "device_property"},
    "tensor": {"dim", "stride", "data_type", "is_virtual", "is_pass_by_value", "ragged_offset", "reordering_type",
               "name", "uid"},
    "conv_fprop": {"padding", "pre_padding", "post_padding", "stride", "dilation", "convolution_mode",
                   "compute_data_type", "name"},
}
KEYWORDS["conv_dgrad"] = KEYWORDS["conv_wgrad"] = KEYWORDS["conv_fprop"]


def _check_keywords(what: str, kw: dict) -> None:
    """A TypeError for a keyword the real binding does not take, as pybind11 raises."""
    unknown = set(kw) - KEYWORDS[what]
    if unknown:
        raise TypeError(f"{what}(): incompatible function arguments: {sorted(unknown)}")


class FakeTensor:
    def __init__(self, graph, name: str, **attrs):
        self.graph, self.name, self.attrs = graph, name, dict(attrs)

    def set_output(self, flag):
        self.attrs["output"] = flag
        return self

    def set_dim(self, dim):
        self.attrs["dim"] = list(dim)
        return self

    def set_stride(self, stride):
        self.attrs["stride"] = list(stride)
        return self

    def set_data_type(self, dt):
        self.attrs["data_type"] = dt
        return self


class FakeGraph:
    """One graph over ``engines``: [(name, notes, workspace_bytes), ...] in the heuristics' order."""

    def __init__(self, engines, calls: list, **kwargs):
        _check_keywords("pygraph", kwargs)
        self.engines = list(engines)
        self.calls = calls
        self.barred = [False] * len(self.engines)
        self.max_ws = None
        self.built: list[int] = []
        calls.append(("pygraph", kwargs))

    def tensor(self, **kw):
        _check_keywords("tensor", kw)
        self.calls.append(("tensor", kw))
        return FakeTensor(self, kw.get("name", ""), **{k: v for k, v in kw.items() if k != "name"})

    def _op(self, kind, **kw):
        _check_keywords(kind, kw)
        self.calls.append((kind, {k: v for k, v in kw.items() if not isinstance(v, FakeTensor)}))
        return FakeTensor(self, kind)

    def conv_fprop(self, image, weight, **kw):
        return self._op("conv_fprop", **kw)

    def conv_dgrad(self, loss, filter, **kw):  # noqa: A002 - the frontend's argument name
        return self._op("conv_dgrad", **kw)

    def conv_wgrad(self, image, loss, **kw):
        return self._op("conv_wgrad", **kw)

    def validate(self):
        self.calls.append(("validate", {}))

    def build_operation_graph(self):
        self.calls.append(("build_operation_graph", {}))

    def create_execution_plans(self, modes):
        self.calls.append(("create_execution_plans", {"modes": list(modes)}))

    def _filter(self, notes, keep: bool):
        for note in notes:
            for i, (_, have, _) in enumerate(self.engines):
                has = note in have
                self.barred[i] = self.barred[i] or (not has if keep else has)

    def select_numeric_notes(self, notes):
        self.calls.append(("select_numeric_notes", {"notes": list(notes)}))
        self._filter(notes, True)

    def deselect_numeric_notes(self, notes):
        self.calls.append(("deselect_numeric_notes", {"notes": list(notes)}))
        self._filter(notes, False)

    def deselect_workspace_greater_than(self, nbytes):
        self.calls.append(("deselect_workspace_greater_than", {"bytes": nbytes}))
        self.max_ws = nbytes

    def get_execution_plan_count(self):
        return len(self.engines)

    def get_plan_name_at_index(self, i):
        return self.engines[i][0]

    def build_plan_at_index(self, i):
        name, _, ws = self.engines[i]
        if self.barred[i] or (self.max_ws is not None and ws > self.max_ws):
            raise RuntimeError(f"Deselecting execution plan at position {i}")
        self.built.append(i)

    def get_workspace_size_plan_at_index(self, i):
        # the frontend's docstring: "If the graph is not built at the index, this will return 0."
        self.calls.append(("get_workspace_size_plan_at_index", {"index": i}))
        return self.engines[i][2] if i in self.built else 0

    def execute_plan_at_index(self, pointers, workspace, index, handle=None):
        """Records the run (nothing computed): which plan, on which handle, with a workspace
        pointer and one device pointer per graph tensor."""
        if index not in self.built:
            raise RuntimeError(f"execution plan at position {index} was not built")
        if not all(isinstance(p, int) for p in pointers.values()) or not isinstance(workspace, int):
            raise TypeError("execute_plan_at_index takes integer device pointers")
        self.calls.append(("execute_plan_at_index", {"index": index, "handle": handle, "tensors": len(pointers)}))


def fake_module(engines, graphs: list, calls: list) -> SimpleNamespace:
    """A ``cudnn`` module whose graphs list ``engines`` (each made graph appended to ``graphs``)."""
    def pygraph(**kw):
        g = FakeGraph(engines, calls, **kw)
        graphs.append(g)
        return g

    def create_handle():
        calls.append(("create_handle", {}))
        return 7

    def set_stream(handle, stream):
        calls.append(("set_stream", {"handle": handle, "stream": stream}))

    return SimpleNamespace(pygraph=pygraph, create_handle=create_handle, set_stream=set_stream,
                           data_type=SimpleNamespace(FLOAT="FLOAT", HALF="HALF", BFLOAT16="BFLOAT16", DOUBLE="DOUBLE"),
                           heur_mode=SimpleNamespace(A="A", FALLBACK="FALLBACK"),
                           numerical_note=SimpleNamespace(**{n: n for n in NOTE_NAMES}))
