"""What every test folder shares: the markers the folders give (tests/mpi/ runs mpiexec with several
ranks, tests/gpu/ is the GPU path), assertion rewriting in the shared helpers, and the fixtures more
than one test file used to define for itself.

The folders (pyproject's ``testpaths``, fast lanes first):

- tests/unit/<package>/: the packages' functions called in-process (tests/unit/structure/: the
  layout of the code itself);
- tests/cli/: the command line (typer's CliRunner on ``dnnplan.cli.app``, or ``python -m dnnplan``);
- tests/bench/: the benchmarks' own code in bench/ and the published runs they read;
- tests/gpu/: the GPU path; tests needing a CUDA device skip without one, those on recording doubles
  run anywhere (``pytest tests/gpu`` on a GPU machine);
- tests/mpi/: runs under mpiexec with several ranks.

A test elsewhere that spawns several ranks carries ``@pytest.mark.mpi`` itself; ``slow`` is always
marked by hand. Helpers, doubles and stand-in workers live in tests/support/, data in tests/assets/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# the helpers' asserts report like the tests' own (registered before any test imports them)
pytest.register_assert_rewrite("tests.support")

TESTS = Path(__file__).resolve().parent
#: The marker each top folder gives every test under it.
FOLDER_MARKS = {"mpi": "mpi", "gpu": "gpu"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            top = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:  # a test file outside tests/
            continue
        if top in FOLDER_MARKS:
            item.add_marker(FOLDER_MARKS[top])


@pytest.fixture(autouse=True)
def _no_mpi_files_left(request):
    """After each test marked ``mpi``: the MPI shared-memory files it made and no live process maps
    removed (lifecycle.shm_leftovers), as `dnnplan`'s own jobs remove theirs; a test that runs
    ``mpiexec`` itself (a rank that aborts on purpose, tests/mpi/test_executor_mpi.py) would else leave
    them in /dev/shm. The stop tests' own check (tests/mpi/test_stop_signals.py) runs before this."""
    if request.node.get_closest_marker("mpi") is None:
        yield
        return
    from lifecycle import shm_leftovers  # noqa: PLC0415 - only where a test runs MPI
    earlier = shm_leftovers.before()
    yield
    shm_leftovers.remove_left(earlier)


@pytest.fixture
def dnnplan_cache(tmp_path, monkeypatch) -> Path:
    """A per-test profile cache (``DNNPLAN_CACHE``) under the test's tmp_path, so no test reads or
    fills the user's; use with ``pytestmark = pytest.mark.usefixtures("dnnplan_cache")``."""
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def plan2(tmp_path_factory) -> str:
    """A plan file: lenet5 data parallel on 2 devices of dgx-a100 at batch 8 (written once a module)."""
    # imported here, not at the top: collecting the tests need not load the whole package
    from tests.support.executor_plans import write_uniform_plan  # noqa: PLC0415
    return write_uniform_plan(tmp_path_factory.mktemp("plans"), "lenet5", 2, 8, "data", machine="dgx-a100")
