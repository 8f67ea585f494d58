#!/usr/bin/env bash
# The runtime under AddressSanitizer and UndefinedBehaviorSanitizer: builds
# it alone (no MLIR, no CUDA) with -fsanitize=address,undefined into
# build-asan/, then runs what reads untrusted input under it:
#  * the unit tests of the artifact loader and verifier, the data loaders,
#    safetensors and metrics I/O, the tokenizers, weights and checkpoints,
#    and the executor;
#  * the lit tests of artifacts, data files, tokenizers, weights,
#    checkpoints and generation with
#    the sanitized moe-run and moe-data (the full build's moec compiles
#    their artifacts), the artifact, command-line and tokenizer fuzzers
#    among them (test/moe-data/tokenizer-fuzz.test: mutated tokenizer.json
#    files against HF's tokenizers);
#  * moe-import, which reads untrusted config.json files, against seeded
#    config mutations (test/moe-import/fuzz_import.py). It links MLIR, so
#    it is built in a second tree, build-asan-import/, with the compiler on
#    (moe-import and what it links only: the dialect and the importer;
#    MLIR's own libraries are not instrumented);
#  * the virtual GPU (issue 46), where the CUDA toolkit's headers are: the
#    CUDA backend's sources and their emulation built in a third tree,
#    build-asan-vgpu/ (its targets only, nothing by nvcc), running the
#    emulation's own tests and the CUDA kernel tests on the virtual H100 (a
#    reduced set: every kernel test, with the fibers' stacks announced to
#    ASan). Training steps are not run here yet: ASan reports a store out
#    of bounds in loadHiddenKernel during the experts' backward of a step,
#    not yet explained (issue 46's note).
# Any sanitizer report fails the run. Needs the full build (scripts/setup.sh
# or scripts/test-all.sh) for moec and the lit configuration. .ci/run runs
# it after the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 0 ] || { echo "sanitize: takes no arguments, got: $*" >&2; exit 2; }
dir=build-asan
jobs=${MOE_BUILD_JOBS:-2}
[ -f build/test/lit.site.cfg.py ] || { echo "sanitize: build/ is missing: run scripts/setup.sh first" >&2; exit 1; }

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMOE_BUILD_COMPILER=OFF -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_VIRTUAL_GPU=OFF \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
fi
suites=(ArtifactTests DataTests IOTests TextTests TrainTests EngineTests)
ninja -C "$dir" -j"$jobs" "${suites[@]}" moe-run moe-data moe-fuzz-artifact

importdir=build-asan-import
if [ ! -f "$importdir/build.ninja" ]; then
  cmake -G Ninja -S . -B "$importdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_VIRTUAL_GPU=OFF -DLLVM_USE_LINKER=lld \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
fi
ninja -C "$importdir" -j"$jobs" moe-import

vgpudir=build-asan-vgpu
vgpu=0
if [ -f /usr/local/cuda/include/cuda_runtime_api.h ]; then
  vgpu=1
  if [ ! -f "$vgpudir/build.ninja" ]; then
    cmake -G Ninja -S . -B "$vgpudir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DMOE_BUILD_COMPILER=OFF -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_VIRTUAL_GPU=ON \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  fi
  ninja -C "$vgpudir" -j"$jobs" VirtualGpuTests VirtualGpuKernelTests
fi

# Open MPI and hwloc keep allocations until exit by design; leaks in them
# are not ours. Everything else must be clean.
suppressions=$(mktemp)
trap 'rm -f "$suppressions"' EXIT
printf 'leak:%s\n' libmpi libopen-pal libopen-rte libhwloc libevent libpmix \
  mca_ > "$suppressions"
# The runtime refuses an allocation that fails (nothrow new) with an error
# naming the buffer, which tests check; ASan would abort on it instead.
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:halt_on_error=1:fast_unwind_on_malloc=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$suppressions
# Open MPI unloads its components at exit, and its libraries have no frame
# pointers: keep the components loaded and unwind fully, so that every leak
# report names the library the suppressions above match.
export OMPI_MCA_mca_base_component_disable_dlclose=1

status=0
for suite in "${suites[@]}"; do
  echo "sanitize: $suite"
  "$dir/bin/$suite" --gtest_brief=1 || status=1
done

echo "sanitize: lit tests of artifacts, data, tokenizers, weights, checkpoints and generation"
timeout 3000 /usr/lib/llvm-19/build/utils/lit/lit.py -sv build/test \
  --param runtime_tools_dir="$PWD/$dir/bin" \
  --filter '(moe-run/(artifact-fuzz|flags-fuzz|hostile-flags|checkpoint|checkpoint-async|load-checkpoint|data-formats|weights|errors|generate)|moe-data/[a-z-]+)\.test' ||
  status=1

if [ "$vgpu" -eq 1 ]; then
  echo "sanitize: the virtual GPU's tests and its kernel tests"
  "$vgpudir/bin/VirtualGpuTests" --gtest_brief=1 || status=1
  MOE_VIRTUAL_GPU=h100 "$vgpudir/bin/VirtualGpuKernelTests" --gtest_brief=1 \
    --gtest_filter='-FlashAttentionKernelTest.SameBitsEveryRun' || status=1
fi

echo "sanitize: moe-import against seeded config mutations"
python3 test/moe-import/fuzz_import.py --tool "$importdir/bin/moe-import" \
  --seed 1 --mutants 100 --timeout 60 \
  test/moe-import/Inputs/*.json || status=1
[ "$status" -eq 0 ] && echo "sanitize: no sanitizer reports, every test passed"
exit "$status"
