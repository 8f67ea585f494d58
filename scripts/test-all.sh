#!/usr/bin/env bash
# The whole test suite: the lit tests (dialect, passes, moec, moe-run end to
# end, the PyTorch reference check) and the GoogleTest unit tests.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1

# Test-only: HF transformers (from PyPI, beside Debian's torch) for the test
# that loads our weights into MixtralForCausalLM.
if ! build/hf-venv/bin/python -c "import transformers" 2>/dev/null; then
  rm -rf build/hf-venv
  /usr/bin/python3 -m venv --system-site-packages build/hf-venv &&
    build/hf-venv/bin/pip install -q --disable-pip-version-check "transformers==4.40.2" ||
    { echo "test-all: cannot install transformers into build/hf-venv" >&2; exit 1; }
fi

# Test-only: current PyTorch and HF transformers from PyPI (pinned to the
# versions checked), for HF's own Qwen3-MoE and DeepSeek-V3 (test/hf).
if ! build/hf-current-venv/bin/python -c "import torch, transformers" 2>/dev/null; then
  rm -rf build/hf-current-venv
  /usr/bin/python3 -m venv build/hf-current-venv &&
    build/hf-current-venv/bin/pip install -q --disable-pip-version-check \
      "torch==2.15.0" "transformers==5.25.0" ||
    { echo "test-all: cannot install torch and transformers into build/hf-current-venv" >&2; exit 1; }
fi

# Test-only: TensorBoard from PyPI, whose EventAccumulator reads moe-run's
# event files (test/moe-run/tensorboard.test).
if ! build/tb-venv/bin/python -c "import tensorboard" 2>/dev/null; then
  rm -rf build/tb-venv
  /usr/bin/python3 -m venv build/tb-venv &&
    build/tb-venv/bin/pip install -q --disable-pip-version-check "tensorboard==2.21.0" ||
    { echo "test-all: cannot install tensorboard into build/tb-venv" >&2; exit 1; }
fi

# Test-only: HF tokenizers and sentencepiece from PyPI, which train the
# tokenizers that moe-data's ids are checked against (test/moe-data).
if ! build/tok-venv/bin/python -c "import tokenizers, sentencepiece" 2>/dev/null; then
  rm -rf build/tok-venv
  /usr/bin/python3 -m venv build/tok-venv &&
    build/tok-venv/bin/pip install -q --disable-pip-version-check \
      "tokenizers==0.23.3" "sentencepiece==0.2.3" ||
    { echo "test-all: cannot install tokenizers into build/tok-venv" >&2; exit 1; }
fi

# cuobjdump reads the nvcc-built kernels' registers and shared memory
# (scripts/cuda-resources.sh, scripts/cuda-kernel-coverage.sh); the
# toolkit here has none, pip's works on its objects.
if [ -d /usr/local/cuda ] && ! command -v cuobjdump > /dev/null &&
  [ ! -x /usr/local/cuda/bin/cuobjdump ] &&
  ! ls build/cuobjdump-venv/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump > /dev/null 2>&1; then
  rm -rf build/cuobjdump-venv
  /usr/bin/python3 -m venv build/cuobjdump-venv &&
    build/cuobjdump-venv/bin/pip install -q --disable-pip-version-check \
      "nvidia-cuda-cuobjdump==13.2.51" ||
    { echo "test-all: cannot install cuobjdump into build/cuobjdump-venv" >&2; exit 1; }
fi

lit_out=$(mktemp)
# A hung test must fail the run, not outlast CI.
timeout 3000 /usr/lib/llvm-19/build/utils/lit/lit.py -sv build/test 2>&1 | tee "$lit_out"
lit_status=${PIPESTATUS[0]}
(cd build && ctest -j2 --output-on-failure --timeout 600) 2>&1 | tee "$lit_out.ctest"
ctest_status=${PIPESTATUS[0]}

count() { grep -Eo "$1" "$2" | grep -Eo '[0-9]+' | tail -n 1; }
lit_passed=$(count '^ *Passed *: *[0-9]+' "$lit_out"); lit_passed=${lit_passed:-0}
lit_failed=$(count '^ *Failed *: *[0-9]+' "$lit_out"); lit_failed=${lit_failed:-0}
ctest_total=$(count 'tests failed out of [0-9]+' "$lit_out.ctest"); ctest_total=${ctest_total:-0}
ctest_failed=$(count '[0-9]+ tests failed out of' "$lit_out.ctest"); ctest_failed=${ctest_failed:-0}
# Tests that need what this machine lacks (a GPU) are skipped: ctest for
# an exit code of 77, lit for an unmet REQUIRES.
ctest_skipped=$(grep -c '(Skipped)' "$lit_out.ctest")
lit_skipped=$(count '^ *Unsupported *: *[0-9]+' "$lit_out"); lit_skipped=${lit_skipped:-0}
rm -f "$lit_out" "$lit_out.ctest"
passed=$((lit_passed + ctest_total - ctest_failed - ctest_skipped))
skipped=$((lit_skipped + ctest_skipped))
failed=$((lit_failed + ctest_failed))
if [ "$lit_status" -ne 0 ] || [ "$ctest_status" -ne 0 ]; then
  [ "$failed" -gt 0 ] || failed=1
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
