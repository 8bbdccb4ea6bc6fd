#!/usr/bin/env bash
# The CPU validation report of docs/VALIDATION.md ("Ahead of time on this computer"): `dnnplan
# validate` on the zoo's CNNs at 1 and 2 ranks of machine `local`, each plan run 3 times in ABBA
# order, ahead-of-time predictions with the in-run column beside them. Writes OUT/NET-Pr/ (report.md,
# figures, summary.json) and OUT/NET-Pr.json. Run it on a quiet machine (nothing else running).
#   bash bench/executor/validate_cpu.sh [OUT]          (default OUT: validate-cpu)
set -euo pipefail
out=${1:-validate-cpu}
mkdir -p "$out"
resnet="$(cd "$(dirname "$0")/.." && pwd)/assets/resnet18-64.yaml"
# network, samples per rank: lenet5 at 32 a rank is a step of about 5-10 ms; alexnet and the
# 64x64 ResNet-18 take 100 ms to a few seconds
for spec in "lenet5 32" "alexnet 2" "$resnet 8"; do
  set -- $spec
  for ranks in 1 2; do
    name="$(basename "$1" .yaml)-${ranks}r"
    dnnplan validate "$1" --ranks "$ranks" --batch $(( $2 * ranks )) --repeats 3 --steps 9 \
      --json "$out/$name.json" --report "$out/$name" --force
  done
done
