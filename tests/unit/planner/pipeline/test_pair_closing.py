"""The choice proved (planner.pipeline.pair_closing.proved): the chosen pair's relaxed stages closed
exactly, unless the caller keeps them relaxed (a refit past the time limit: planner.first_plan.refit_choice,
whose closings could each take its whole grace)."""

from __future__ import annotations

from types import SimpleNamespace

from planner.pipeline.choice import Best, Candidate
from planner.pipeline.pair_closing import proved


class _Search:
    """What proved() reads of a search, recording each pair searched again."""

    def __init__(self):
        self.settings = SimpleNamespace(budget=None, parallel=None)
        self.ceiling, self.bounding_s, self.compute, self.deadline = float("inf"), 0.0, None, None
        self.searched: list[tuple] = []

    def best(self, stages, micro_batches, close=False, chunks=1):
        self.searched.append((stages, micro_batches, close))
        return None  # nothing better: the best held stands


def _case():
    relaxed = SimpleNamespace(relaxed=1)
    best = Best(10.0, 2, 8, (1,), relaxed, lower_s=8.0)
    out = [Candidate(2, 8, 7.0, step_s=10.0, lower_s=8.0)]
    return best, out


def test_the_chosen_pairs_relaxed_stages_are_closed_unless_kept_relaxed():
    search = _Search()
    best, out = _case()
    got, _ = proved(search, best, out, 0.0, 0.01)
    assert search.searched == [(2, 8, True)] and got is best
    kept = _Search()
    got, _ = proved(kept, *_case(), 0.0, 0.01, close_choice=False)
    assert kept.searched == [] and got.step_s == 10.0 and got.lower_s == 8.0  # its gap stated, not closed
