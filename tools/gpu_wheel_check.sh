#!/usr/bin/env bash
# Proof that the prebuilt wheel runs the CUDA kernels as a user installs it: on a GPU machine with
# no network and no CUDA toolkit on PATH, lstm-ort's wheel and onnxruntime-gpu's wheel go into a
# fresh target directory, and the GPU tests (`pytest -m gpu tests`) run from that install.
#
# onnxruntime-gpu's wheel (~245 MiB) is larger than one call of the device machine may carry
# (64 MiB), so it travels in parts, one call each, into the ignored folder .gpu-proof/:
#
#   here:   PYTHON=python3.12 tools/build_wheel.sh   (the wheel holds the StreamBatcher's extension:
#           cp312-abi3, for the device image's Python 3.12)
#           tools/gpu_wheel_check.sh pack [LSTM_ORT_WHEEL]   (default: the newest dist/*manylinux*.whl)
#           -> .gpu-proof/p1 .. .gpu-proof/pN (each < 56 MiB; the last holds our wheel and SHA256SUMS)
#   there:  one call per part, in order, each carrying only its own folder:
#             carry [".gpu-proof/p1"]  command: bash tools/gpu_wheel_check.sh stage
#             ...
#             carry [".gpu-proof/pN"]  command: bash tools/gpu_wheel_check.sh run
#           (parts carried earlier stay on the warm machine; `run` says which are missing if it
#           went cold in between: then send those again.)
#
# `run` expects the device image's python3 (3.12, whose site-packages hold the CUDA 13.0 pip
# libraries nvidia-cuda-runtime, nvidia-cublas, nvidia-cudnn-cu13, ... that torch uses). The
# target directory gets a link `nvidia` to them, so lstm_ort/lib/../../nvidia/cu13/lib resolves as
# in a pip install of lstm-ort[gpu], where those packages share site-packages with lstm_ort.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
proof=$root/.gpu-proof
ORT_VERSION=${ORT_VERSION:-1.31.1}
PYVER=${PYVER:-3.12}
PART_MIB=${PART_MIB:-50}

pack() {
  local wheel=${1:-$(ls -t "$root"/dist/lstm_ort-*manylinux*.whl 2>/dev/null | head -1)}
  [ -f "$wheel" ] || { echo "no lstm-ort wheel: run tools/build_wheel.sh first" >&2; exit 2; }
  rm -rf "$proof"; mkdir -p "$proof/dl"
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$PYVER" --implementation cp --platform manylinux_2_28_x86_64 \
    -d "$proof/dl" "onnxruntime-gpu==$ORT_VERSION"
  local ort; ort=$(ls "$proof"/dl/onnxruntime_gpu-*.whl)
  (cd "$proof/dl" && split -b "${PART_MIB}M" -d -a 2 "$(basename "$ort")" ort.part.)
  local parts=("$proof"/dl/ort.part.*) n=${#parts[@]} i=0
  for part in "${parts[@]}"; do
    i=$((i + 1)); mkdir -p "$proof/p$i"; mv "$part" "$proof/p$i/"
  done
  cp "$wheel" "$proof/p$n/"
  (cd "$proof/dl" && sha256sum "$(basename "$ort")" | sed 's/$/ ort/') > "$proof/p$n/SHA256SUMS"
  (cd "$proof/p$n" && sha256sum "$(basename "$wheel")") >> "$proof/p$n/SHA256SUMS"
  echo "$(basename "$ort") $n" > "$proof/p$n/MANIFEST"
  rm -rf "$proof/dl"
  du -sh "$proof"/p* | sed 's/^/  /'
  echo "device calls, in order (each within the machine's warm window of the last):"
  for ((k = 1; k < n; k++)); do echo "  carry [\".gpu-proof/p$k\"]  bash tools/gpu_wheel_check.sh stage"; done
  echo "  carry [\".gpu-proof/p$n\"]  bash tools/gpu_wheel_check.sh run"
}

stage() {
  ls -la "$proof"/p* 2>/dev/null || echo "nothing under .gpu-proof yet"
}

run() {
  local last; last=$(ls -d "$proof"/p* 2>/dev/null | grep -c . || true)
  local manifest; manifest=$(ls "$proof"/p*/MANIFEST 2>/dev/null | head -1)
  [ -n "$manifest" ] || { echo "the last part (with MANIFEST) was not carried" >&2; exit 3; }
  local ort_name n; read -r ort_name n < "$manifest"
  local missing=()
  for ((k = 1; k <= n; k++)); do ls "$proof/p$k"/ort.part.* >/dev/null 2>&1 || missing+=(".gpu-proof/p$k"); done
  [ ${#missing[@]} -eq 0 ] || { echo "missing parts (machine went cold?): carry again ${missing[*]}" >&2; exit 3; }
  local work=/tmp/lstm-ort-proof out=${OUT:-/tmp/lstm-ort-proof/out}
  rm -rf "$work"; mkdir -p "$work/wheels" "$out"
  cat "$proof"/p*/ort.part.* > "$work/wheels/$ort_name"
  local last_dir; last_dir=$(dirname "$manifest")
  cp "$last_dir"/lstm_ort-*.whl "$work/wheels/"
  (cd "$work/wheels" && sed "s/ ort$//" "$last_dir/SHA256SUMS" | sha256sum -c -) || { echo "checksum mismatch" >&2; exit 3; }

  # No CUDA toolkit: nvcc off PATH, CUDA_HOME unset, toolkit folders off LD_LIBRARY_PATH.
  local p keep=() ld=()
  IFS=: read -ra dirs <<< "$PATH"
  for p in "${dirs[@]}"; do [ -x "$p/nvcc" ] || keep+=("$p"); done
  PATH=$(IFS=:; echo "${keep[*]}")
  IFS=: read -ra dirs <<< "${LD_LIBRARY_PATH:-}"
  for p in "${dirs[@]}"; do case $p in *cuda*|"") ;; *) ld+=("$p") ;; esac; done
  export PATH LD_LIBRARY_PATH=$(IFS=:; echo "${ld[*]}")
  unset CUDA_HOME CUDA_PATH CUDACXX
  if command -v nvcc >/dev/null; then echo "nvcc still on PATH: $(command -v nvcc)" >&2; exit 3; fi
  echo "nvcc hidden; LD_LIBRARY_PATH='$LD_LIBRARY_PATH'"

  local py=${PYTHON:-python3} site=$work/site
  "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$site" \
    "$work/wheels/$ort_name" "$work"/wheels/lstm_ort-*.whl
  # The CUDA 13 pip libraries of this image, where lstm-ort[gpu] would have put them.
  local nvidia; nvidia=$("$py" -c "import importlib.util as u; s = u.find_spec('nvidia'); print(list(s.submodule_search_locations)[0] if s else '')")
  [ -d "$nvidia/cu13/lib" ] || { echo "no nvidia/cu13/lib in this python's site-packages ($nvidia)" >&2; exit 3; }
  ln -s "$nvidia" "$site/nvidia"
  "$py" -m pip list 2>/dev/null | grep -iE "^(nvidia-(cuda-runtime|cublas|cudnn)|onnxruntime)" || true

  cd "$work"  # not the source tree: lstm_ort comes from $site
  export PYTHONPATH=$site LSTM_ORT_TEST_INSTALLED=1 PYTHONUNBUFFERED=1
  unset LSTM_ORT_LIBRARY
  "$py" - <<'EOF' 2>&1 | tee "$out/proof.txt"
import numpy as np, onnxruntime as ort, lstm_ort
from lstm_ort.builders import LstmSpec, random_layers
from lstm_ort.runtime import cuda_status
from lstm_ort.testing import make_feeds, run_fused
print("onnxruntime", ort.__version__, ort.__file__, ort.get_available_providers())
print("lstm_ort", lstm_ort.__file__, lstm_ort.get_library_path())
import sys
from lstm_ort.builders import fused_model
spec, rng = LstmSpec(16, 32, num_layers=2), np.random.default_rng(0)
layers, feeds = random_layers(spec, rng), make_feeds(spec, 8, 4, rng)
sess = lstm_ort.InferenceSession(fused_model(spec, layers), providers=["CUDAExecutionProvider"])
y = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})[0]
cpu = run_fused(spec, layers, feeds)[0]
loaded = cuda_status()
print("session providers:", sess.get_providers(), "| CUDA kernels:", loaded, "| max |CUDA - CPU|:", float(np.abs(y - cpu).max()))
maps = open("/proc/self/maps").read()
for lib in ("libcudart.so", "libcublas.so", "libcublasLt.so", "liblstm_ort_cuda.so", "libonnxruntime_providers_cuda.so", "libcudnn.so"):
    print(" ", lib, "->", sorted({l.split()[-1] for l in maps.splitlines() if lib in l}) or "not loaded")
if "CUDAExecutionProvider" not in sess.get_providers() or not loaded[0]:
    sys.exit("FAILED: the session did not run on the CUDA EP with lstm_ort's CUDA kernels")
EOF
  "$py" -m pytest -m gpu -p no:cacheprovider -q -rs "$root/tests" 2>&1 | tee "$out/pytest-gpu.txt"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  stage) stage ;;
  run) run ;;
  *) echo "usage: $0 pack [WHEEL] | stage | run" >&2; exit 2 ;;
esac
