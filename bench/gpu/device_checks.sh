#!/usr/bin/env bash
# The GPU checks of one lent-device session (docs/VALIDATION.md, "One GPU"): PyTorch step times of
# zoo networks for bench/bench_gpu_steps.py, dnnplan's cupy backend tests, and a cupy kernel
# profile of gpt2. Writes into $OUT (default ./gpu-out). Needs PyTorch, torchvision and cupy there;
# pulp and highspy (for importing dnnplan) from wheels in .whl/ if that folder exists.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/nvidia-smi.csv"
python3 -c "import torch, torchvision, cupy; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cupy', cupy.__version__)"
timeout 240 python3 bench/gpu/torch_steps.py --out "$OUT/torch_steps.json" 2>&1 | tee "$OUT/torch_steps.log" | grep -v '^ '
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:.
fi
export PYTHONPATH=${PYTHONPATH:-.}
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_backend.py tests/test_kernels_conv_precision.py tests/test_profile_command.py 2>&1 | tail -15 | tee "$OUT/pytest_gpu.log"
timeout 100 python3 -m dnnplan profile gpt2 -b 8 --backend cupy --out "$OUT/cupy_gpt2_b8.json" --max-seconds 75 --json > "$OUT/cupy_profile.log" 2>&1; echo "profile rc=$?"; head -c 700 "$OUT/cupy_profile.log"; echo
