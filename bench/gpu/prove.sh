#!/usr/bin/env bash
# The GPU proof on one lent GPU, in one call (docs/VALIDATION.md, "GPU loop"): bench/gpu/prove.py's
# stages, most important first, kept while their own limits sum within BUDGET seconds (default 450,
# 15 of them kept for the rest); what does not fit, or lacks a package, is skipped before anything
# runs and written to $OUT/details.json ("skipped") and prove.log with why (bench/gpu/prove_budget.py).
#
# The GPU machine has no package index: the Python packages dnnplan and the proof need that its
# image lacks travel as wheels in .whl/ (ignored by git). Download them once, on a machine with PyPI,
# from the repository's root (Python 3.12 x86-64 wheels, whatever this machine is):
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
#     nvidia-cudnn-frontend==1.16.0 pulp==3.3.2 highspy==1.16.0 mpich==5.0.2 mpi4py==4.1.2 \
#     typer==0.29.2 click==8.5.1 rich==15.0.0 pydantic==2.14.4 pydantic_core==2.50.5 \
#     annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0 threadpoolctl==3.8.0 \
#     pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0 pytest-timeout==2.4.0
#
# (about 45 MB; cupy-cuda13x, the cuDNN and NCCL libraries, numpy, PyYAML, onnx, ml-dtypes, torch and
# torchvision are the image's: a stage needing one the image lacks is skipped, saying which). Then,
# through the device tool, carrying .whl:
#
#   run(command="COMMIT=<git rev-parse --short HEAD> BUDGET=450 bash bench/gpu/prove.sh",
#       carry=[".whl"], timeout_s=540)
#
# (the commit named in the command: .git may not travel; `--skip STAGES --rows ROWS` after the
# script choose what runs, bench/gpu/prove.py: a second call with `--skip graphs,tests --rows ...`
# takes the rows the first had no time for). Everything lands in $OUT (at most 8 files, read
# bench/gpu/prove.py): the rows go to bench/assets/gpu-validation.json and the tables to
# profiler/profiles/ in a later commit.
#
# Locally, the plumbing without a GPU (numpy, lenet5; no figure): bash bench/gpu/prove.sh --dry-run
set -u
OUT=${OUT:-$(pwd)/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if [ -d .whl ] && [ "${1:-}" != "--dry-run" ]; then
  # mpich's libmpi and mpiexec are data files, which pip --target drops: a prefix install keeps them
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v /mpich-) || exit 3
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed --prefix /tmp/mpich \
    .whl/mpich-*.whl || exit 3
  export PYTHONPATH=/tmp/site:$(pwd)
  export PATH=/tmp/mpich/bin:$PATH
  export MPI4PY_LIBMPI=/tmp/mpich/lib/libmpi.so.12
  # cuDNN, cuBLAS and NCCL as the CUDA 13 wheels lay them out (nvidia/cu13/lib), for the libraries
  # that dlopen them by name (kernels.cuda.libs also preloads cuDNN itself)
  LIBS=$("$PY" -c "import glob, site, sys; print(':'.join(sorted({p.rsplit('/', 1)[0] for r in sys.path + site.getsitepackages() for p in glob.glob(r + '/nvidia/*/lib/lib*.so*')})))")
  export LD_LIBRARY_PATH=${LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export PYTHONPATH=${PYTHONPATH:-$(pwd)}
export DNNPLAN_CACHE=/tmp/dnnplan-cache
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1
  "$PY" -c "import numpy, sys; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
  "$PY" -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
  "$PY" -c "from kernels.cuda import libs; print(libs.versions())" 2>&1 | tail -1
  which mpiexec
} > "$OUT/prove.log" 2>&1
cat "$OUT/prove.log"
exec "$PY" bench/gpu/prove.py --out "$OUT" --commit "${COMMIT:-unknown}" --budget "${BUDGET:-450}" "$@"
