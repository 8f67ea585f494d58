#!/usr/bin/env bash
# The runtime alone, built as a cluster node without MLIR or CUDA would
# build it (-DMOE_BUILD_COMPILER=OFF -DMOE_ENABLE_CUDA=OFF) into
# build-runtime/, then checked: its unit tests pass, moe-run links no LLVM,
# MLIR or CUDA library, and it trains an artifact that the full build's moec
# compiled, with the losses of the full build's moe-run bit for bit (same
# machine, kernels and thread count). Needs the full build (scripts/setup.sh)
# for moec. .ci/run runs it after the test suite. The build runs flatc and
# llvm-tblgen (the op table, Debian's llvm-19) as tools and links neither.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 0 ] || { echo "runtime-only: takes no arguments, got: $*" >&2; exit 2; }
dir=build-runtime
jobs=${MOE_BUILD_JOBS:-2}
[ -x build/bin/moec ] || { echo "runtime-only: build/bin/moec is missing: run scripts/setup.sh first" >&2; exit 1; }

if [ ! -f "$dir/build.ninja" ]; then
  cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DMOE_BUILD_COMPILER=OFF -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_VIRTUAL_GPU=OFF >/dev/null
fi
ninja -C "$dir" -j"$jobs"

if ldd "$dir/bin/moe-run" | grep -Ei 'libLLVM|libMLIR|libcuda|libcublas|libnccl'; then
  echo "runtime-only: $dir/bin/moe-run links the libraries above; the runtime must not" >&2
  exit 1
fi

(cd "$dir" && ctest -j"$jobs" --output-on-failure --timeout 600)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/bin/moec models/tiny.mlir -o "$work/tiny.moebin"
build/bin/moe-data synth --out "$work/tokens.bin" --tokens 100000 >/dev/null
for tools in build "$dir"; do
  OPENBLAS_NUM_THREADS=1 "$tools/bin/moe-run" "$work/tiny.moebin" --data "$work/tokens.bin" \
    --steps 20 --threads 1 --metrics "$work/$(basename "$tools").jsonl" --quiet
done
python3 test/moe-run/compare_losses.py --rtol 0 "$work/build.jsonl" "$work/$dir.jsonl"
echo "runtime-only: the runtime built without MLIR and CUDA trains moec's artifact as the full build does"
