"""A compute model that says it times kernels on demand (costmodel.compute.model.OnDemand) and does
nothing: for the code that must tell such a model apart (priced_once leaves it unwrapped) or that
drives its table (planner.problem.full_profile.refreshed)."""

from __future__ import annotations

from types import SimpleNamespace


class OnDemandStub:
    """Every method of the protocol, doing nothing; machine ``local``'s name and an empty table."""

    name = "local"
    refresh = False

    def __init__(self):
        self.table = SimpleNamespace(entries={})

    def calls_of(self, weigh, time_missing=True): ...
    def retime(self, calls): ...
    def install(self, entries): ...
    def time_in_step(self, calls, before, updates=()): ...
    def time_collectives_in_step(self, calls, ranks): ...
    def retime_dispatch(self): ...
    def save(self): ...
