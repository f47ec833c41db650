#!/usr/bin/env bash
# GPU acceptance check for the CUDA backend, run from the repository root on a
# machine with an NVIDIA GPU (sized for one H200, under 5 minutes):
#   tests/gpu/check.sh
# Prints nvidia-smi, builds with CUDA, runs //worker:backend_parity_test (which
# must not skip anything there), then //worker:mlp_benchmark on cuda (MLP
# 4096-4096-4096-10, batch 1024) and a small cpu run. Exits non-zero on any
# failure. Bazel's output base: $PSTRAIN_BAZEL_OUTPUT_BASE or /tmp/bazel_cuda.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

step() { printf '\n=== %s\n' "$*"; }
fail() { printf '\ncheck.sh: FAIL: %s\n' "$*" >&2; exit 1; }

step "GPU"
nvidia-smi || echo "check.sh: warning: nvidia-smi failed (the parity test will tell)"

if ! command -v bazel >/dev/null; then
  step "setup (bazel is missing)"
  ./psctl setup || fail "./psctl setup failed"
fi
[[ -x /usr/local/cuda/bin/nvcc ]] ||
  fail "no CUDA toolkit at /usr/local/cuda: the build would be CPU-only"

BAZEL=(bazel "--output_base=${PSTRAIN_BAZEL_OUTPUT_BASE:-/tmp/bazel_cuda}")
FLAGS=(--color=no --curses=no)
step "build with CUDA"
"${BAZEL[@]}" build "${FLAGS[@]}" //worker:backend_parity_test \
  //worker:mlp_benchmark || fail "build failed"
BIN="$("${BAZEL[@]}" info "${FLAGS[@]}" bazel-bin 2>/dev/null)" ||
  fail "bazel info failed"

step "CUDA vs CPU parity"
log="$(mktemp)"
"$BIN/worker/backend_parity_test" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
((rc == 0)) || fail "backend_parity_test failed (exit $rc)"
if grep -q '^\[  SKIPPED \]' "$log"; then
  fail "backend_parity_test skipped tests on a GPU machine (see above)"
fi

step "benchmark: cuda"
"$BIN/worker/mlp_benchmark" --device=cuda \
  --sizes=4096-4096-4096-10:1024,512-1024-10:256 ||
  fail "cuda benchmark failed"

step "benchmark: cpu (small)"
"$BIN/worker/mlp_benchmark" --device=cpu --sizes=512-1024-10:256 ||
  fail "cpu benchmark failed"

printf '\ncheck.sh: OK\n'
