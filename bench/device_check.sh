#!/usr/bin/env bash
# The in-image probe on a real GPU machine (the device tool's H200), as one prepared run, as it ships:
# the zipapp imagekit.render.probe_bundle builds (what every image carries at /opt/imagekit/check.py), run by
# that machine's own python3 (torch, nvcc and nvidia-smi are installed there), with the expectations
# read from the machine itself, and --require-gpu so that a GPU that is not visible fails instead of
# skipping. Commit the JSON as a fixture (tests/fixtures/check/) and its gemm_perf figure to
# BENCHMARKS.md.
#
#   here:  bash bench/device_check.sh prepare   builds build/device-check/check.py with imagekit's own
#                                               Python ($IMAGEKIT_PYTHON, else .venv/bin/python, else python3)
#   there: bash bench/device_check.sh [PROBE OPTIONS]   (the device tool's run, carry build/device-check)
#          writes $OUT/device-check.json, $OUT/device-check.log and $OUT/check.py (the zipapp it ran)
#
# Two steps because building the zipapp needs imagekit's dependencies (its facts.json is generated
# from imagekit/data through PyYAML and pydantic) and the lent machine has no pydantic and no network;
# where python3 can build it, the run builds a fresh one and uses that. PROBE OPTIONS go to the probe
# after the expectations (--skip extension leaves out the longest check). DEVICE_CHECK_PROBE names
# the prepared zipapp instead of build/device-check/check.py; DEVICE_CHECK_TIMEOUT_S bounds the probe.
# Exit status: the probe's (0 every required check passed, 1 one failed, 2 bad options), 124 past the
# bound, 3 when there is no probe or no torch to read expectations from.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prepared=${DEVICE_CHECK_PROBE:-$root/build/device-check/check.py}
# Well inside one device call (10 minutes) with the machine's start, so that a rerun can still fit a
# session's 15: the first torch.compile on the GPU (Triton) and the CUDA extension build take a few
# minutes of it.
bound=${DEVICE_CHECK_TIMEOUT_S:-360}

# build_probe PYTHON DEST: the zipapp, written whole (a temporary file, then a rename) or not at all.
build_probe() {
  local python=$1 dest=$2
  mkdir -p "$(dirname "$dest")" || return 1
  if PYTHONPATH=$root "$python" -c 'import sys
from imagekit.render.probe_bundle import build_zipapp
sys.stdout.buffer.write(build_zipapp("check"))' > "$dest.tmp"; then
    mv -f "$dest.tmp" "$dest"
  else
    rm -f "$dest.tmp"
    return 1
  fi
}

# end_tasks: the probe runs each bounded task (compile, extension) in a session of its own, so that
# it can kill the task's whole group; a probe killed from outside leaves them running. After the
# bound, end every group led by a process that runs this run's zipapp ($probe, a path of this run).
end_tasks() {
  local proc argv
  for proc in /proc/[0-9]*; do
    mapfile -d '' -t argv 2> /dev/null < "$proc/cmdline" || continue
    [[ ${argv[1]:-} == "$probe" ]] && kill -KILL -- "-${proc#/proc/}" "${proc#/proc/}" 2> /dev/null
  done
}

if [[ ${1:-} == prepare ]]; then
  python=${IMAGEKIT_PYTHON:-}
  [[ -z $python && -x $root/.venv/bin/python ]] && python=$root/.venv/bin/python
  if ! build_probe "${python:-python3}" "$prepared"; then
    echo "device_check: ${python:-python3} could not build the probe (above); use a Python with imagekit's dependencies: IMAGEKIT_PYTHON=... bash bench/device_check.sh prepare" >&2
    exit 3
  fi
  echo "$prepared: carry its folder to the device run (bash bench/device_check.sh)"
  exit 0
fi

out=${OUT:-/tmp/device-check}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 3  # absolute: end_tasks matches the probe's own path
log=$out/device-check.log
json=$out/device-check.json
probe=$out/check.py
rm -f "$json"
if build_probe python3 "$probe" 2> "$log"; then
  from="built here by python3"
elif [[ -f $prepared ]] && cp "$prepared" "$probe.tmp" && mv -f "$probe.tmp" "$probe"; then
  from="prepared: $prepared (python3 here cannot build it, above)"
else
  echo "device_check: no probe: python3 here cannot build it (see $log) and $prepared is not there; run 'bash bench/device_check.sh prepare' where imagekit's dependencies are, and carry build/device-check" >&2
  exit 3
fi

# The expectations, read from this machine's python3: one a line (cuDNN's empty on a CPU wheel).
mapfile -t seen < <(python3 - 2>> "$log" <<'PY'
import sys

import torch

cudnn = torch.backends.cudnn.version()
# 8902 is cuDNN 8.9.2, 91002 cuDNN 9.10.2: the major version, as an image's label gives it
print(torch.__version__.split("+")[0])
print(".".join((torch.version.cuda or "cpu").split(".")[:2]))
print((cudnn // 10000 if cudnn >= 10000 else cudnn // 1000) if cudnn else "")
print(f"{sys.version_info[0]}.{sys.version_info[1]}")
PY
)
if (( ${#seen[@]} != 4 )); then
  echo "device_check: python3 here ($(command -v python3)) could not say its torch (see $log): run this where python3 holds torch" >&2
  exit 3
fi
flavour=$(command -v nvcc > /dev/null && echo devel || echo runtime)
args=(--expect-torch "${seen[0]}" --expect-cuda "${seen[1]}" --expect-python "${seen[3]}" --flavour "$flavour" --require-gpu)
[[ -n ${seen[2]} ]] && args+=(--expect-cudnn "${seen[2]}")
args+=("$@")
{
  echo "probe: $from, sha256 $(sha256sum < "$probe" | cut -d' ' -f1)"
  echo "python3: $(command -v python3)"
  echo "args: ${args[*]}"
  nvidia-smi
  nvcc --version
} >> "$log" 2>&1
# Run as images run it (python3 /opt/imagekit/check.py): the zipapp alone, never the checkout's package.
env -u PYTHONPATH timeout --kill-after=15 "$bound" python3 "$probe" "${args[@]}" > "$json.tmp" 2>> "$log"
status=$?
mv -f "$json.tmp" "$json"
if (( status == 124 || status == 137 )); then
  echo "device_check: the probe ran past ${bound}s (DEVICE_CHECK_TIMEOUT_S)" | tee -a "$log" >&2
  end_tasks
fi
python3 - "$json" 2> /dev/null <<'PY' || echo "device_check: no check document in $json (exit $status): see $log" >&2
import json, sys

doc = json.load(open(sys.argv[1]))
for check in doc["checks"]:
    print(f'{check["status"]:5} {check["name"]:16} {check.get("actual")!s:.60} {check.get("cause") or check.get("reason") or ""}')
print("summary:", " ".join(f"{k}={v}" for k, v in doc["summary"].items()))
PY
exit "$status"
