#!/usr/bin/env bash
# Prepares the GPU check (issue 17) on a machine without a GPU, for a lent
# one that has no MLIR, Abseil, FlatBuffers, OpenBLAS, MPI or GoogleTest and
# where nothing can be installed or built. It writes .gpu/ (git ignores it;
# the device tool's `carry` names it), at most 64 MiB:
#
#   bundle.tar.xz  bin/: moe-run, moe-data and the CUDA test binaries
#               (sm_80, sm_90), and the virtual GPU's kernel tests
#               (VirtualGpuKernelTests); lib/: the CUDA backend module, the
#               virtual GPU's (run.sh --rehearse) and every library those
#               need but the CUDA driver, cudart, cuBLAS(Lt), NCCL and
#               cuDNN, glibc and its loader included. run.sh
#               unpacks it and starts each binary through
#               lib/ld-linux-x86-64.so.2, so that the lent machine's own
#               system libraries (another distribution's) play no part.
#               Compressed: OpenBLAS alone is 36 MB unpacked.
#   artifacts/  every artifact run.sh trains, compiled here by moec (and
#               its rehearsal's stand-ins for the mid-size model and the
#               benchmark, test/gpu/Inputs)
#   data/       the token files the references were computed on
#   ref/        the CPU's references: metrics of the runs run.sh repeats on
#               the GPU, and step dumps (every gradient and updated weight;
#               the optimizer moments and the weights before, which
#               test/gpu/compare_dumps.py does not read, are left out)
#   MANIFEST    the commit, the sizes and what each part is for
#
# Usage: test/gpu/prepare.sh   (uses build/, configured by scripts/setup.sh;
#        MOE_BUILD_DIR and MOE_GPU_BUNDLE name others)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MOE_BUILD_DIR:-build}
bundle=${MOE_GPU_BUNDLE:-.gpu}
limit_bytes=$((64 * 1024 * 1024))
say() { echo "prepare: $*"; }
fail() { echo "prepare: error: $*" >&2; exit 1; }
[ $# -eq 0 ] ||
  fail "unknown arguments '$*': it takes none (MOE_BUILD_DIR and MOE_GPU_BUNDLE name other directories)"

# --- build: the CUDA backend for both architectures -------------------------
[ -f "$build/build.ninja" ] || scripts/setup.sh > /dev/null
grep -q '^MOE_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
  fail "$build/ was configured without the CUDA backend (MOE_ENABLE_CUDA is off; is /usr/local/cuda/bin/nvcc there?)"
grep -q '^MOE_ENABLE_VIRTUAL_GPU:BOOL=ON' "$build/CMakeCache.txt" ||
  fail "$build/ was configured without the virtual GPU (MOE_ENABLE_VIRTUAL_GPU is off), which run.sh --rehearse runs on"
# Every CUDA object must carry sm_80 and sm_90 code (CMakeLists.txt's
# default CMAKE_CUDA_ARCHITECTURES "80-real;90").
cuda_objects=$(grep -c -- '--generate-code=arch=compute_' "$build/build.ninja" || true)
for arch in 80 90; do
  with=$(grep -c -- "--generate-code=arch=compute_$arch,code=\[[a-z_0-9,]*sm_$arch\]" "$build/build.ninja" || true)
  [ "$with" -gt 0 ] && [ "$with" -eq "$cuda_objects" ] ||
    fail "$build/ does not build every CUDA source for sm_$arch (CMAKE_CUDA_ARCHITECTURES)"
done
binaries=(moe-run moe-data CudaKernelTests CudaTests ConformanceTests VirtualGpuKernelTests)
modules=(libmoe_backend_cuda.so libmoe_backend_virtual_gpu.so)
ninja -C "$build" -j"${MOE_BUILD_JOBS:-2}" "${binaries[@]}" moe_backend_cuda \
  moe_backend_virtual_gpu moec > /dev/null ||
  fail "the build failed (ninja -C $build)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib}
for name in "${binaries[@]}"; do
  cp "$build/bin/$name" "$stage/bin/"
done
elfs=("$stage"/bin/*)
for module in "${modules[@]}"; do
  cp "$build/lib/$module" "$stage/lib/"
  elfs+=("$stage/lib/$module")
done
# Debug sections and symbol tables would take a good part of the budget
# (the system's libraries come stripped).
strip --strip-unneeded "${elfs[@]}"

# --- the libraries they need ------------------------------------------------
# What the lent machine provides itself: the driver and the CUDA libraries
# of its toolkit and of PyTorch's site-packages (run.sh puts those on the
# library path). Everything else travels.
provided='^(linux-vdso\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libcudnn[a-z_]*\.so)'
for elf in "${elfs[@]}"; do
  listing=$(LD_LIBRARY_PATH="$stage/lib" ldd "$elf") || fail "ldd $elf failed"
  missing=$(echo "$listing" | grep 'not found' || true)
  [ -z "$missing" ] || fail "$(basename "$elf") needs a library this machine lacks: $(echo "$missing" | tr -s ' \t' ' ')"
  # "name => /path (address)", and the loader as "/lib64/ld-linux... (address)".
  while read -r name path; do
    if [ "$name" = loader ]; then
      cp -L "$path" "$stage/lib/ld-linux-x86-64.so.2"
    elif ! [[ $name =~ $provided ]] && [ ! -e "$stage/lib/$name" ]; then
      cp -L "$path" "$stage/lib/$name"
    fi
  done < <(echo "$listing" |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 } $1 ~ /^\// { print "loader", $1 }')
done
loader=$stage/lib/ld-linux-x86-64.so.2
[ -f "$loader" ] || fail "ldd named no dynamic loader for moe-run"

# Check the bundle the way run.sh starts it: through its own loader, with
# only lib/ ahead of the system's paths. Every library must come from lib/
# but those the lent machine provides (found here in /usr/local/cuda).
for elf in "${elfs[@]}"; do
  resolved=$("$loader" --library-path "$stage/lib" --list "$elf") ||
    fail "$(basename "$elf") does not load through the bundle's loader"
  outside=$(echo "$resolved" | awk -v lib="$stage/lib/" -v ok="$provided" '
    $2 == "=>" && ($3 == "not" || (index($3, lib) != 1 && $1 !~ ok)) { print $1 " => " $3 }')
  [ -z "$outside" ] || fail "$(basename "$elf") resolves libraries outside the bundle: $outside"
done
rm -rf "$bundle"
mkdir -p "$bundle"/{artifacts,data,ref}
tar cf - -C "$stage" bin lib | xz -6 -T"$(nproc)" > "$bundle/bundle.tar.xz"
say "bundle: $(ls "$stage/bin" | wc -l) binaries, $(ls "$stage/lib" | wc -l) libraries, $(du -sb "$stage" | cut -f1) bytes unpacked"

# --- artifacts, data and the CPU's references --------------------------------
# The references come from the bundled binaries, started as run.sh starts
# them: a rehearsal of the bundle as well.
moec=$build/bin/moec
# The artifacts compiled for the cpu target run on the GPU as well: they
# leave out the ops only the CPU backend runs, as GPU targets do (the fused
# LM head and GEMM epilogues, the routers' load counters;
# docs/semantics.md). test/lit.cfg.py's %cuda_compatible is the same.
gpu=(--fuse-lm-head-loss=false --fuse-gemm-epilogues=false --count-expert-loads=false)
bin() {
  local name=$1
  shift
  "$loader" --library-path "$stage/lib" "$stage/bin/$name" "$@"
}
run_cpu() { bin moe-run "$@" --threads "$(nproc)" --quiet; }
bin moe-data synth --out "$bundle/data/synth.bin" --tokens 400000 > /dev/null
# tiny: the bundled model; mid: bench/models/gpu-mid.mlir; gpu-moe: the
# benchmark. BF16 throughout (the GPU runs the same recipe as the CPU,
# docs/precision.md); FP8 expert GEMMs with delayed scales, which sm_90
# runs.
fp8=(--fp8=experts --fp8-scaling=delayed --target=h200)
"$moec" "${gpu[@]}" models/tiny.mlir --precision=bf16 -o "$bundle/artifacts/tiny-bf16.moebin"
"$moec" "${gpu[@]}" models/tiny.mlir --precision=bf16 "${fp8[@]}" -o "$bundle/artifacts/tiny-fp8.moebin"
# Blockwise FP8 (1 x 128 and 128 x 128 scales: cuBLASLt's block scaling).
"$moec" "${gpu[@]}" models/tiny.mlir --precision=bf16 --fp8=experts --fp8-scaling=blockwise --target=h200 -o "$bundle/artifacts/tiny-fp8b.moebin"
# Expert parallelism on one GPU: a mesh of one expert-parallel rank, whose
# experts exchange their rows with themselves over NCCL (run.sh tiny-ep1).
"$moec" "${gpu[@]}" models/tiny.mlir --precision=bf16 --mesh ep=1 -o "$bundle/artifacts/tiny-bf16-ep1.moebin"
# Gradient accumulation on one GPU: the shared pipeline runner with one
# stage and two microbatches (DevicePipeline).
"$moec" "${gpu[@]}" models/tiny.mlir --precision=bf16 --microbatches 2 -o "$bundle/artifacts/tiny-mb2.moebin"
# The experts recomputing their up projections instead of keeping them: the
# device must give the kept run's bits.
"$moec" "${gpu[@]}" models/tiny.mlir --precision=bf16 --recompute-experts -o "$bundle/artifacts/tiny-bf16-recomputed.moebin"
# A learning rate of 1e30: the second step's loss is not finite.
"$moec" "${gpu[@]}" test/moe-run/Inputs/diverge.mlir --precision=bf16 -o "$bundle/artifacts/diverge-bf16.moebin"
"$moec" "${gpu[@]}" bench/models/gpu-mid.mlir --precision=bf16 -o "$bundle/artifacts/mid-bf16.moebin"
# The benchmark for the GPU it runs on, with the memory plan's report: its
# kernel workspace is what run.sh holds the measured scratch to.
"$moec" "${gpu[@]}" bench/models/gpu-moe.mlir --precision=bf16 --target=h200 --report=memory \
  -o "$bundle/artifacts/gpu-moe-bf16.moebin" > "$bundle/ref/gpu-moe-bf16.memory"
"$moec" "${gpu[@]}" bench/models/gpu-moe.mlir --precision=bf16 "${fp8[@]}" --report=memory \
  -o "$bundle/artifacts/gpu-moe-fp8.moebin" > "$bundle/ref/gpu-moe-fp8.memory"
# The rehearsal's stand-ins (run.sh --rehearse), which the virtual GPU runs
# in seconds: the mid-size model's widths in one small layer, and the
# benchmark's form at the tiny model's size, compiled as the benchmark is
# (test/gpu/Inputs).
"$moec" "${gpu[@]}" test/gpu/Inputs/rehearse-mid.mlir --precision=bf16 -o "$bundle/artifacts/rehearse-mid.moebin"
"$moec" "${gpu[@]}" test/gpu/Inputs/rehearse-bench.mlir --precision=bf16 --target=h200 --report=memory \
  -o "$bundle/artifacts/rehearse-bf16.moebin" > "$bundle/ref/rehearse-bf16.memory"
"$moec" "${gpu[@]}" test/gpu/Inputs/rehearse-bench.mlir --precision=bf16 "${fp8[@]}" --report=memory \
  -o "$bundle/artifacts/rehearse-fp8.moebin" > "$bundle/ref/rehearse-fp8.memory"

# The tiny runs also from four other initialisation seeds: their spread is
# what bounds the GPU's late steps (test/gpu/compare_runs.py).
data=$bundle/data/synth.bin
for recipe in bf16 fp8 fp8b; do
  dump=$bundle/ref/tiny-$recipe-step1
  run_cpu "$bundle/artifacts/tiny-$recipe.moebin" --data "$data" --steps 30 \
    --metrics "$bundle/ref/tiny-$recipe.jsonl" --dump-step "$dump"
  rm -f "$dump"/optim_state*.safetensors "$dump/params.safetensors"
  for seed in 101 102 103 104; do
    run_cpu "$bundle/artifacts/tiny-$recipe.moebin" --data "$data" --steps 30 \
      --seed "$seed" --metrics "$bundle/ref/tiny-$recipe-seed$seed.jsonl"
  done
done
run_cpu "$bundle/artifacts/mid-bf16.moebin" --data "$data" --steps 3 \
  --metrics "$bundle/ref/mid-bf16.jsonl"
run_cpu "$bundle/artifacts/rehearse-mid.moebin" --data "$data" --steps 1 \
  --metrics "$bundle/ref/rehearse-mid.jsonl"
run_cpu "$bundle/artifacts/tiny-mb2.moebin" --data "$data" --steps 3 \
  --metrics "$bundle/ref/tiny-mb2.jsonl"
# run.sh holds the mesh of one to the plain run's reference: on the CPU the
# two are the same bits.
run_cpu "$bundle/artifacts/tiny-bf16-ep1.moebin" --data "$data" --steps 5 \
  --metrics "$stage/tiny-bf16-ep1.jsonl"
head -n 5 "$bundle/ref/tiny-bf16.jsonl" > "$stage/tiny-bf16-5.jsonl"
python3 test/moe-run/compare_losses.py --keys loss,grad_norm --rtol 0 \
  "$stage/tiny-bf16-5.jsonl" "$stage/tiny-bf16-ep1.jsonl" > /dev/null ||
  fail "the tiny model on a mesh of one (--mesh ep=1) does not repeat the plain run's losses on the CPU"

# --- the budget ---------------------------------------------------------------
bytes=$(du -sb "$bundle" | cut -f1)
{
  echo "moec GPU bundle (test/gpu/prepare.sh), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' with local changes')"
  echo "prepared $(date -u +%FT%TZ) on $(uname -n); CUDA code for sm_80 and sm_90"
  echo "total $bytes bytes of at most $limit_bytes"
  echo "bundle.tar.xz unpacked:"
  (cd "$stage" && du -ab bin lib | sort -k2)
  (cd "$bundle" && du -ab bundle.tar.xz artifacts data ref | sort -k2)
} > "$bundle/MANIFEST"
[ "$bytes" -le "$limit_bytes" ] ||
  fail "$bundle/ holds $bytes bytes, over the 64 MiB the device tool carries (see $bundle/MANIFEST)"
say "$bundle/ ready: $((bytes / 1024 / 1024)) MiB of 64 (carry: [\"$bundle\"]; then test/gpu/run.sh)"
