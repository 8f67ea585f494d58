#!/usr/bin/env bash
# Line coverage of the CUDA backend's host code by the virtual GPU's tests
# (issue 46): lib/Runtime/Cuda's host files (.cpp and .h), built for the
# virtual GPU with gcov instrumentation in a build directory of their own,
# run by every virtual-GPU test (the unit tests, the kernel tests, the
# conformance suite's virtual half and the lit tests of test/virtual-gpu),
# then counted with gcov. Prints one line per file and the total, and the
# kernels those runs launched (their launch log; scripts/cuda-kernel-
# coverage.sh, where cuobjdump is found).
#
#   scripts/cuda-host-coverage.sh [BUILD_DIR]   (default build-vgpu-coverage)
#
# MOE_BUILD_JOBS sets ninja's -j (default 2). Exits 1 if a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(realpath -m "${1:-build-vgpu-coverage}")
jobs=${MOE_BUILD_JOBS:-2}
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_USE_LINKER=lld \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
    -DMOE_VIRTUAL_GPU_COVERAGE=ON > /dev/null
fi
units=(VirtualGpuKernelTests VirtualGpuGemmDescriptorTests
       VirtualGpuGemmRunnerTests VirtualGpuNcclBackendTests VirtualGpuCudaTests
       VirtualGpuPinnedStagingTests ConformanceTests)
ninja -C "$build" -j"$jobs" moec moe-run moe-data moe_backend_virtual_gpu \
  VirtualGpuNcclRanksTests "${units[@]}" > "$build/coverage-build.log"
find "$build" -name '*.gcda' -delete
log=$build/launches.tsv
: > "$log"
export MOE_VIRTUAL_GPU_LAUNCH_LOG=$log
status=0
for unit in "${units[@]}"; do
  filter=()
  [ "$unit" = ConformanceTests ] && filter=(--gtest_filter='ConformanceVirtualGpu.*')
  echo "coverage: $unit"
  MOE_VIRTUAL_GPU=h100 MOE_VIRTUAL_GPU_PROGRAM=$unit \
    "$build/bin/$unit" --gtest_brief=1 "${filter[@]}" > "$build/$unit.log" 2>&1 ||
    { echo "coverage: $unit failed (see $build/$unit.log)"; status=1; }
done
echo "coverage: lit test/virtual-gpu"
python3 /usr/lib/llvm-19/build/utils/lit/lit.py -q "$build/test/virtual-gpu" ||
  status=1
# gcov reads the counts beside each object; -n prints the summary only.
objects=$build/lib/Runtime/VirtualGpu/CMakeFiles/moe_runtime_cuda_virtual.dir
python3 - "$objects" "$root/lib/Runtime/Cuda" "$build" <<'PY'
import glob, os, re, subprocess, sys
objects, sources, build = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
counts = {}
for gcda in glob.glob(os.path.join(objects, "**", "*.gcda"), recursive=True):
    out = subprocess.run(["gcov", "-n", "-o", os.path.dirname(gcda), gcda],
                         capture_output=True, text=True, cwd=objects).stdout
    for name, percent, lines in re.findall(
            r"File '([^']+)'\nLines executed:([0-9.]+)% of (\d+)", out):
        # Relative names are the compiler's: from the build directory.
        path = os.path.realpath(os.path.join(build, name))
        if os.path.dirname(path) != sources or path.endswith((".cu", ".cuh")):
            continue
        lines = int(lines)
        run = round(float(percent) * lines / 100)
        # A header counted from several objects: keep its best object's.
        if path not in counts or run > counts[path][0]:
            counts[path] = (run, lines)
total_run = sum(r for r, _ in counts.values())
total = sum(n for _, n in counts.values())
for path in sorted(counts):
    run, lines = counts[path]
    print(f"{os.path.basename(path):28s} {run:5d} of {lines:5d} lines  {100 * run / max(lines, 1):5.1f}%")
print(f"{'total':28s} {total_run:5d} of {total:5d} lines  {100 * total_run / max(total, 1):5.1f}%")
PY
pip_cuobjdump=$(ls build/cuobjdump-venv/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump 2>/dev/null | tail -1)
[ -n "$pip_cuobjdump" ] && export CUOBJDUMP=${CUOBJDUMP:-$pip_cuobjdump}
if [ -n "${CUOBJDUMP:-}" ] || command -v cuobjdump > /dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
  scripts/cuda-kernel-coverage.sh "$log" | tail -1
else
  echo "coverage: kernels launched: $(cut -f1 "$log" | sort -u | wc -l) distinct instantiations (cuobjdump not found for the per-kernel list)"
fi
exit $status
