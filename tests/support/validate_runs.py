"""A stand-in for validate's runs (executor.session.validate.measure_both) and the small validate
command the validate tests interrupt and resume (tests/cli/validate/test_validate_interrupt.py,
test_validate_repeats.py)."""

from __future__ import annotations

from executor.launch.worker import JobResult
from executor.report.compare import Comparison, Measured
from executor.session import validate as validation

ARGS = ["validate", "lenet5", "--ranks", "2", "--batch", "8", "--machine", "dgx-a100", "--steps", "1", "--warmup",
        "0", "--no-check"]


class FakeRuns:
    """Stands in for executor.session.validate.measure_both: records each plan it is given (and whether
    it was to be timed in-run), and raises KeyboardInterrupt (Ctrl-C) on run number ``stop_at``
    (1-based; None: never). Its k-th run measures k ms against 2 ms predicted ahead of time and,
    timed in-run, 4 ms predicted from in-run kernel times."""

    def __init__(self, stop_at: int | None = None):
        self.stop_at = stop_at
        self.plans: list[dict] = []
        self.in_run: list[bool] = []

    def __call__(self, prep, **kwargs):
        self.plans.append(validation.plan_layers(prep.plan))
        self.in_run.append(kwargs["in_run"])
        if len(self.plans) == self.stop_at:
            raise KeyboardInterrupt
        step = 0.001 * len(self.plans)
        job = JobResult(ranks=[], loss=0.0, check=None, threads=1)
        measured = Measured(2, 1, step, step, step, ())
        again = Comparison(0.004, measured, (), (), step / 0.004 - 1) if kwargs["in_run"] else None
        return job, Comparison(0.002, measured, (), (), step / 0.002 - 1), again
