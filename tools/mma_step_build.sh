#!/usr/bin/env bash
# Builds tools/mma_step_bench.cu with the CUDA plugin's sources (everything but the onnxruntime
# glue) into $OUT_DIR (default build-mma/): on a GPU host, or on a machine with nvcc and cuBLAS's
# headers and libraries only (CUBLAS_ROOT: a directory with include/ and lib/, e.g. the
# nvidia-cublas wheel's nvidia/cu13). JOBS parallel compiles (default: the cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT_DIR:-$root/build-mma}
jobs=${JOBS:-$(nproc)}
rm -rf "$out/obj"
mkdir -p "$out/obj"
flags=(-std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -lineinfo -I"$root/custom_ops" -I"$root/custom_ops/include")
link=()
if [ -n "${CUBLAS_ROOT:-}" ]; then
  flags+=(-I"$CUBLAS_ROOT/include")
  link+=(-L"$CUBLAS_ROOT/lib")
fi
cd "$root/custom_ops"
sources=(enum_names.cc overrides.cc attribute_parsing.cc precision.cc)
for f in cuda/*.cc cuda/*.cu cuda/*/*.cc cuda/*/*.cu; do
  case $f in cuda/cuda_ops.cc | cuda/entry_points.cc | cuda/plugin_entry.cc) continue ;; esac
  sources+=("$f")
done
printf '%s\n' "${sources[@]}" "../tools/mma_step_bench.cu" |
  xargs -P "$jobs" -I{} sh -c 'nvcc "$@" -c {} -o "$0/obj/$(echo {} | sed "s,^\.\./,," | tr / _).o" > "$0/obj/$(echo {} | sed "s,^\.\./,," | tr / _).log" 2>&1 || { cat "$0/obj/$(echo {} | sed "s,^\.\./,," | tr / _).log"; exit 1; }' "$out" "${flags[@]}"
nvcc "${flags[@]}" "$out"/obj/*.o "${link[@]}" -lcublas -lcublasLt -o "$out/mma_step_bench"
echo "built $out/mma_step_bench"
