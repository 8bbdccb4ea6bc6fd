"""One planning call's kernel times, each priced once (pure).

The pipeline search prices a block's layers for every (pipeline degree, micro-batch count) pair
it bounds, and the ZeRO choice does so again for every stage it plans; a layer's shard (its
local batch, shapes and parameters) recurs across pairs (a split of ``d`` ranks at micro-batch
``b`` and of ``2 d`` at ``2 b`` compute the same shard) and across ZeRO stages (a stage changes
the collectives, the update and the memory, never a shard's kernels). :class:`PricedOnce` wraps
the command's compute model for one planning call and remembers each answer under exactly the
arguments it was asked with: the compute model's answer is a function of them alone (its table is
fixed for the call), so every number, and every plan, is the one the model gives unwrapped
(``tests/unit/planner/problem/test_priced_once.py``).

A model that times kernels on demand (``costmodel.compute.model.OnDemand``, machine ``local``)
is not wrapped: its table grows while the planner weighs, and an entry interpolated early may be
timed later. Created per planning call (:func:`priced_once`), never module-wide: nothing outlives
the call; across processes each worker starts with none remembered (:meth:`PricedOnce.__reduce__`).
"""

from __future__ import annotations

from costmodel.compute.model import ComputeModel, OnDemand

#: the compute model's answers remembered: each is a function of its arguments alone
REMEMBERED = ("pass_s", "update_s", "copy_s", "call_s", "workspace_bytes", "kept_bytes", "dispatch_s")


class PricedOnce:
    """``model`` with the answers of :data:`REMEMBERED` kept per arguments; everything else is the
    model's own (attributes forwarded)."""

    def __init__(self, model: ComputeModel):
        self.model = model
        self.asked: dict[tuple, object] = {}  # (method, args, keyword args) -> the model's answer
        for name in REMEMBERED:
            if hasattr(model, name):
                setattr(self, name, self._remembering(name, getattr(model, name)))

    def _remembering(self, name: str, method):
        asked = self.asked

        def answer(*args, **kwargs):
            key = (name, args, tuple(sorted(kwargs.items())) if kwargs else ())
            try:
                return asked[key]
            except KeyError:
                got = asked[key] = method(*args, **kwargs)
                return got
            except TypeError:  # an argument that cannot be a key: asked of the model each time
                return method(*args, **kwargs)

        answer.__name__ = name
        return answer

    def __getattr__(self, name: str):
        if name == "model":  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self.model, name)

    def __reduce__(self):
        return PricedOnce, (self.model,)


def priced_once(model: ComputeModel) -> ComputeModel:
    """``model`` wrapped for one planning call, or itself when it times kernels on demand or is
    wrapped already (module docstring)."""
    if isinstance(model, (OnDemand, PricedOnce)):
        return model
    return PricedOnce(model)
