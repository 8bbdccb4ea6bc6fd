"""Places in the repository the tests read, from this file's own place (tests/support/), so a test
file's depth in tests/ never matters."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder holding pyproject.toml).
ROOT = Path(__file__).resolve().parents[2]
#: The shipped network specs.
ZOO = ROOT / "networks" / "zoo"
#: The tests' data files.
ASSETS = ROOT / "tests" / "assets"
#: The benchmarks.
BENCH = ROOT / "bench"
