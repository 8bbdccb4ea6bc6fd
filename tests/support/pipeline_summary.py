"""What a pipeline search answered, as one comparable tuple: the chosen pair, cut, step and proven
gap, and every pair's bound, step, lower bound, skip reason and closing (tests that check a
search gives the same answer however its pricing is kept)."""

from __future__ import annotations


def search_summary(choice) -> tuple:
    return (choice.stages, choice.micro_batches, choice.chunks, choice.cut, choice.prediction.step_s,
            choice.stats["proven_gap"],
            tuple((c.stages, c.micro_batches, c.chunks, c.bound_s, c.step_s, c.lower_s, c.skipped, c.closed)
                  for c in choice.candidates))
