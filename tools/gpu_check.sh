#!/usr/bin/env bash
# On a GPU machine with onnxruntime-gpu: build the op library with CMake, then run the stages asked for.
#   tools/gpu_check.sh build test sanitize bench low-rank mma-step streams
# (mma-step needs no onnxruntime: tools/gpu_mma_step.sh, the tensor-core step's harness.)
# ORT_INCLUDE_DIR may point at headers carried in (the machine may have no network); so may
# LSTM_ORT_CORPUS_DIR at a folder of the corpus wheels (models/corpus.py: silero-vad's for `streams`).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-/tmp/lstm-ort-build}
out=${OUT:-/tmp/lstm-ort-out}
mkdir -p "$out"
export LSTM_ORT_LIBRARY="$build/liblstm_ort_ops.so" PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rc=0
for stage in "$@"; do
  case $stage in
    build)
      cmake -S "$root" -B "$build" -G Ninja -DLSTM_ORT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DPython_EXECUTABLE="$(command -v python3)" >"$out/cmake.log" 2>&1 &&
        ninja -C "$build" >"$out/build.log" 2>&1 || { tail -n 40 "$out/cmake.log" "$out/build.log"; exit 1; }
      # The StreamBatcher's step path (a Python extension; nanobind may be carried on PYTHONPATH):
      # into the source tree, where PYTHONPATH imports lstm_ort from.
      cp "$build"/_engine*.so "$root/lstm_ort/serving/streams/" 2>/dev/null ||
        echo "no _engine extension built (Python headers or nanobind missing): $(grep -i nanobind "$out/cmake.log" | tail -1)"
      grep -E "registers|spill" "$out/build.log" | sort -u | head -20 ;;
    test)
      (cd "$root" && python3 -m pytest -q -m gpu -x -p no:cacheprovider tests 2>&1 | tail -15) || rc=1 ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        compute-sanitizer --tool $tool --target-processes all --error-exitcode 9 python3 "$root/tools/sanitize_case.py" \
          >"$out/sanitize-$tool.log" 2>&1
        echo "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$tool.log" | tail -1)"
      done ;;
    bench)
      python3 "$root/tools/bench.py" --strategies tiled,persistent,wavefront --json "$out/bench.json" --plot "$out/bench.png" 2>&1 | tail -22 || rc=1 ;;
    low-rank)  # factored weights: ours factored vs ours full rank on the GPU, and error vs rank
      python3 "$root/tools/bench_low_rank.py" --json "$out/low_rank.json" 2>&1 | tail -30 || rc=1 ;;
    streams)  # StreamBatcher on CUDA: one stream, step_batch ticks, step() from client threads (silero-vad)
      python3 "$root/tools/streams_gpu_bench.py" --json "$out/streams_gpu.json" ${STREAMS_ARGS:-} 2>&1 | tail -20 || rc=1 ;;
    mma-step)  # the tensor-core step against float64, under compute-sanitizer, and timed (no onnxruntime)
      OUT="$out/mma-step" "$root/tools/gpu_mma_step.sh" check sanitize time || rc=1 ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
exit $rc
