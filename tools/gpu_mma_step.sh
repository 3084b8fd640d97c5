#!/usr/bin/env bash
# On a GPU host, without onnxruntime: the tensor-core step's harness (tools/mma_step_bench.cu) -
# correctness against float64, compute-sanitizer (memcheck, racecheck, synccheck) on small calls,
# and the old backends against the tensor-core step, ms. BIN: a prebuilt harness (built on another
# machine by tools/mma_step_build.sh), else it is built here. Logs go to $OUT.
#   tools/gpu_mma_step.sh [check] [sanitize] [time] [time-auto] [profile]      (default: the first three)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/mma-step-out}
mkdir -p "$out"
bin=${BIN:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  OUT_DIR=/tmp/mma-step-build "$root/tools/mma_step_build.sh" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  bin=/tmp/mma-step-build/mma_step_bench
fi
if ldd "$bin" | grep -q "not found"; then  # cuBLAS from the toolkit or the pip packages beside torch
  lib=$(dirname "$(find / -name 'libcublasLt.so.13' -not -path '/proc/*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
stages=${*:-check sanitize time}
rc=0
for stage in $stages; do
  case $stage in
    check) timeout 240 "$bin" check >"$out/check.log" 2>&1 || rc=1; grep -E "FAIL|not planned|not on|failure|error|device" "$out/check.log" | head -30 ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" sanitize >"$out/sanitize-$tool.log" 2>&1
        echo "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|failure' "$out/sanitize-$tool.log" | tr '\n' ' ')"
      done ;;
    time) timeout 300 "$bin" time "${RUNS:-15}" >"$out/time.log" 2>&1 || rc=1; grep -v "^    " "$out/time.log" ;;
    time-auto) timeout 200 "$bin" time-auto "${RUNS:-15}" >"$out/time-auto.log" 2>&1 || rc=1; cat "$out/time-auto.log" ;;
    profile)  # one interval of two shapes under Nsight Compute
      for shape in "4 100 512 256 1 fp16" "1 100 512 256 1 fp16" "4 100 512 64 1 fp32"; do
        timeout 120 ncu --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
          --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:MmaStepKernel --launch-skip 150 --launch-count 1 \
          "$bin" run $shape >"$out/ncu-${shape// /_}.log" 2>&1
        echo "ncu $shape: rc=$? $(grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Achieved Occupancy" "$out/ncu-${shape// /_}.log" | tr -s ' ' | tr '\n' ';')"
      done ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
exit $rc
