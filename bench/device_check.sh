#!/usr/bin/env bash
# The in-image check script on a real GPU machine (the device tool's H200), as one prepared run:
#   run: bash bench/device_check.sh      (writes $OUT/device-check.json and $OUT/device-check.log)
# It runs imagekit/incontainer/check.py on that machine's own python3 (torch, nvcc and nvidia-smi
# are installed there), with the expectations read from the machine itself, and --require-gpu so
# that a GPU that is not visible fails instead of skipping. Commit the JSON as a fixture
# (tests/fixtures/check/) and its gemm_perf figure to BENCHMARKS.md.
set -uo pipefail
out=${OUT:-/tmp/device-check}
mkdir -p "$out"
torch=$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')
cuda=$(python3 -c 'import torch; print(".".join((torch.version.cuda or "cpu").split(".")[:2]))')
cudnn=$(python3 -c 'import torch; v = torch.backends.cudnn.version(); print(v // 10000 if v and v >= 10000 else (v // 1000 if v else ""))')
py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
flavour=$(command -v nvcc >/dev/null && echo devel || echo runtime)
args=(--expect-torch "$torch" --expect-cuda "$cuda" --expect-python "$py" --flavour "$flavour" --require-gpu)
[[ -n "$cudnn" ]] && args+=(--expect-cudnn "$cudnn")
{ nvidia-smi; nvcc --version; echo "args: ${args[*]}"; } > "$out/device-check.log" 2>&1
# Bounded well inside one device call (10 minutes) so a rerun fits a session's 15: the first
# torch.compile on the GPU (Triton) and the CUDA extension build take a few minutes of it.
timeout 420 python3 imagekit/incontainer/check.py "${args[@]}" > "$out/device-check.json" 2>> "$out/device-check.log"
status=$?
python3 - "$out/device-check.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for check in doc["checks"]:
    print(f'{check["status"]:5} {check["name"]:16} {check.get("actual")!s:.60} {check.get("cause") or check.get("reason") or ""}')
PY
exit "$status"
