"""A benchmark script read as a module (bench/ is not a package), as the tests of the benchmarks'
own code and of the rows they publish read it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.paths import BENCH


def load_bench(name: str) -> ModuleType:
    """bench/CONCEPT/NAME.py (the one script of that name, in its concept's folder), run afresh as
    module ``NAME`` and registered in ``sys.modules`` under that name (its dataclasses look their
    module up)."""
    found = sorted(BENCH.glob(f"*/{name}.py"))
    assert len(found) == 1, f"bench/*/{name}.py: {found}"
    spec = importlib.util.spec_from_file_location(name, found[0])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
