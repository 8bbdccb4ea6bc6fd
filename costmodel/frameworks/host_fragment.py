"""A framework file's ``host:`` keys from a per-op dispatch cost measured on a computer (pure;
`dnnplan profile --host` writes it for a user's own framework YAML).

The fragment holds ``host.op_s``: the mean host cost of one op over the tiny ops timed, marked
``basis: measured`` with its source (the framework, its version, where its operands lived, the
computer and the date), in the form costmodel.frameworks.framework parses. It says nothing of
``launch_s`` (what a kernel launch adds beside the op: a tiny op's loop holds both) nor of the
kernels each op runs; those keys stay the user's.
"""

from __future__ import annotations


def host_fragment(op_s: float, framework: str, version: str, device: str, machine: str, date: str) -> dict:
    """``{"host": {"op_s": {value, basis, source}}}`` for a measured ``op_s`` (module docstring)."""
    source = (f"dnnplan profile --host --framework {framework}: {framework} {version} on {device}, "
              f"{machine}, {date}; the mean over tiny ops of their time per call")
    return {"host": {"op_s": {"value": float(f"{op_s:.3g}"), "basis": "measured", "source": source}}}
