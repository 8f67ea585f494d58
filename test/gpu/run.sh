#!/usr/bin/env bash
# The GPU check (issue 17), on the lent GPU machine: one call, under 7
# minutes, from a tree that carries .gpu/ (test/gpu/prepare.sh, run here
# first). Nothing is built there: it has no MLIR, Abseil, FlatBuffers,
# OpenBLAS, MPI or GoogleTest, and nothing can be installed.
#
#   1. the GPU, driver and clocks
#   2. the CUDA tests: descriptors, every kernel against its CPU twin, the
#      conformance suite's device half; compute-sanitizer's memcheck on the
#      attention, router and routing kernels
#   3. step 1 of the tiny model in BF16 and FP8 (delayed and blockwise
#      scaling) against the CPU's dump: every gradient and updated weight
#   4. 30 steps of the tiny model (BF16, FP8), 3 of it with two microbatches
#      (gradient accumulation) and 3 of the mid-size model against the CPU's
#      losses; a diverging run stops with the CPU's error
#   5. bench/models/gpu-moe.mlir in BF16 and FP8: median step time, model
#      TFLOP/s and MFU against the datasheet peak and against a BF16 GEMM
#      rate measured in this run, time per opcode, the scratch the
#      instructions took against the memory plan's kernel workspace; the same model as HF
#      transformers' MixtralForCausalLM in PyTorch BF16 (SDPA), the peer
#
# Every part runs under `timeout`, within one deadline for the whole call.
# Results go to $OUT (the device tool's; bench/out/gpu elsewhere): log.txt,
# summary.txt (the table printed last) and runs.tar.gz (every run's
# metrics, the benchmarks' times per opcode). Exit 0
# only if every part ran and passed; a part that cannot find what it needs
# fails loudly.
#
# Usage: test/gpu/run.sh [--rehearse]
#   --rehearse   on a machine without a GPU: the same sequence on the CPU
#                backend (the kernel tests then skip), which checks the
#                bundle, the references and this script before a lease is
#                spent on them
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
bundle=$(realpath -m "${MOE_GPU_BUNDLE:-$root/.gpu}")
device=cuda
if [ $# -gt 1 ] || { [ $# -eq 1 ] && [ "$1" != --rehearse ]; }; then
  echo "run.sh: error: unknown arguments '$*' (known: --rehearse)" >&2
  exit 2
fi
[ $# -eq 1 ] && device=cpu
out=${OUT:-$root/bench/out/gpu}
mkdir -p "$out"
# Scratch (runs, dumps, tokens) stays out of $OUT, which brings back only
# a few files: log.txt, summary.txt and runs.tar.gz.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$out/log.txt
summary=$out/summary.txt
: > "$log"
: > "$summary"
deadline=$((SECONDS + ${MOE_GPU_CHECK_SECONDS:-400}))
peak=${MOE_PEAK_FLOPS:-989e12}
# The comparisons need numpy (the lent machine's python3 has it).
python=${MOE_PYTHON:-python3}
status=0

say() { echo "$*" | tee -a "$log"; }
# One row of the summary: part, verdict, detail.
row() {
  printf '%-28s %-5s %s\n' "$1" "$2" "$3" >> "$summary"
  say "run.sh: $1: $2 $3"
  [ "$2" = ok ] || [ "$2" = skip ] || status=1
}
# part NAME CAP COMMAND...: COMMAND under `timeout`, at most CAP seconds and
# never past the deadline; its output goes to the log and to part.out.
part() {
  local name=$1 cap=$2
  shift 2
  local left=$((deadline - SECONDS))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -le 5 ]; then
    row "$name" FAIL "not run: the call's deadline has passed"
    return 1
  fi
  say "=== $name (at most ${cap}s)"
  local start=$SECONDS
  # Through bash: COMMAND may be one of this script's functions (exported).
  timeout -k 5 "$cap" bash -c '"$@"' "$name" "$@" > "$work/part.out" 2>&1
  local rc=$?
  cat "$work/part.out" >> "$log"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] &&
    say "run.sh: $name: killed after ${cap}s"
  say "--- $name: exit $rc in $((SECONDS - start))s"
  return $rc
}

# --- the bundle and the libraries the machine provides ----------------------
[ -f "$bundle/MANIFEST" ] || {
  row bundle FAIL "$bundle/MANIFEST is missing: run test/gpu/prepare.sh here and carry .gpu"
  cat "$summary"
  exit 1
}
head -3 "$bundle/MANIFEST" >> "$log"
# The binaries and their libraries travel compressed; unpacked, they live
# in the scratch directory (a few seconds).
tools=$work/bundle
mkdir -p "$tools"
if ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
  "$bundle/bundle.tar.xz" "$tools" 2>> "$log"; then
  row bundle FAIL "cannot unpack $bundle/bundle.tar.xz"
  cat "$summary"
  exit 1
fi
# NCCL, cuDNN and (if the toolkit's are missing) cuBLAS live in PyTorch's
# site-packages there.
libpath=$tools/lib
for package in nvidia.nccl nvidia.cudnn nvidia.cublas nvidia.cuda_runtime; do
  dir=$(timeout 30 python3 -c "import $package, os; print(os.path.join(list($package.__path__)[0], 'lib'))" 2>/dev/null) &&
    [ -d "$dir" ] && libpath=$libpath:$dir
done
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && libpath=$libpath:$dir
done
loader=$tools/lib/ld-linux-x86-64.so.2
# Each binary through the bundle's loader: glibc and the rest from its lib/,
# whatever the machine's own distribution is. (The CUDA module is found
# beside it: Registry.cpp looks in lib/ next to the executable's bin/, and
# the executable is then the loader, in lib/ itself.)
bin() {
  local name=$1
  shift
  "$loader" --library-path "$libpath" "$tools/bin/$name" "$@"
}
export -f bin
export loader libpath tools
missing=$("$loader" --library-path "$libpath" --list "$tools/lib/libmoe_backend_cuda.so" 2>&1 | grep 'not found')
if [ -n "$missing" ]; then
  row libraries FAIL "the CUDA module lacks: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
else
  row libraries ok "library path $libpath"
fi

# --- 1. the machine -----------------------------------------------------------
if [ "$device" = cuda ]; then
  if part gpu 30 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv; then
    row gpu ok "$(tail -1 "$work/part.out")"
  else
    row gpu FAIL "nvidia-smi found no GPU"
    cat "$summary"
    exit 1
  fi
else
  row gpu skip "rehearsal on the CPU backend"
fi

# --- 2. the CUDA tests --------------------------------------------------------
# Without a GPU (rehearsal) the kernel tests exit 77.
gtest() {
  local name=$1 cap=$2
  shift 2
  part "$name" "$cap" bin "$@" --gtest_brief=1
  local rc=$?
  local tally
  tally=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/part.out" | tr -s ' ' | tr '\n' ' ')
  if [ "$rc" -eq 0 ]; then
    row "$name" ok "$tally"
  elif [ "$rc" -eq 77 ] && [ "$device" = cpu ]; then
    row "$name" skip "no GPU"
  else
    row "$name" FAIL "exit $rc $tally$(grep -m3 -E '^\[  FAILED  \] [A-Za-z]' "$work/part.out" | tr -s ' ' | tr '\n' ' ')"
  fi
}
gtest cuda-tests 60 CudaTests
gtest kernel-tests 120 CudaKernelTests
gtest conformance 150 ConformanceTests \
  --gtest_filter='Backends/ConformanceTest.EveryOpcode/cuda:ConformanceBf16.*'
if [ "$device" = cuda ]; then
  if ! command -v compute-sanitizer > /dev/null; then
    row memcheck FAIL "compute-sanitizer is not on PATH"
  elif part memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$loader" --library-path "$libpath" "$tools/bin/CudaKernelTests" --gtest_brief=1 \
    --gtest_filter='*AttentionKernelTest*:*RouterKernelTest*:*ExpertRoutingKernelTest*'; then
    row memcheck ok "$(grep -m1 'ERROR SUMMARY' "$work/part.out")"
  else
    row memcheck FAIL "$(grep -m1 'ERROR SUMMARY' "$work/part.out" || tail -1 "$work/part.out")"
  fi
fi

# --- 3 and 4. training against the CPU ----------------------------------------
data=$bundle/data/synth.bin
# The rehearsal uses prepare.sh's thread count: on the CPU, same machine and
# threads, a run repeats the reference bit for bit.
threads=
[ "$device" = cpu ] && threads="--threads $(nproc)"
train() {
  # shellcheck disable=SC2086 # $threads is empty or a flag and its value
  bin moe-run "$@" --data "$data" --device "$device" --quiet $threads
}
export -f train
export data device threads
# compare NAME COMMAND...: a comparison's verdict, its last line the detail.
compare() {
  local name=$1
  shift
  if "$@" > "$work/part.out" 2>&1; then
    row "$name" ok "$(tail -1 "$work/part.out")"
  else
    row "$name" FAIL "$(tail -1 "$work/part.out")"
  fi
  cat "$work/part.out" >> "$log"
}
for recipe in bf16 fp8 fp8b; do
  name=tiny-$recipe
  if part "$name" 60 train "$bundle/artifacts/$name.moebin" --steps 30 \
    --metrics "$work/$name.jsonl" --dump-step "$work/$name-step1"; then
    compare "$name step 1" "$python" test/gpu/compare_dumps.py \
      "$bundle/ref/$name-step1" "$work/$name-step1"
    compare "$name 30 steps" "$python" test/gpu/compare_runs.py \
      "$bundle/ref/$name.jsonl" "$work/$name.jsonl" \
      --other-seeds "$bundle"/ref/"$name"-seed*.jsonl
  else
    row "$name" FAIL "moe-run: $(tail -1 "$work/part.out")"
  fi
done
# Keeping the experts' up projections gives the bits of recomputing them,
# on the device too (the same GEMMs on the same inputs).
if part tiny-recomputed 60 train "$bundle/artifacts/tiny-bf16-recomputed.moebin" \
  --steps 10 --metrics "$work/tiny-recomputed.jsonl"; then
  compare "tiny kept vs recomputed" "$python" test/moe-run/compare_losses.py \
    --rtol 0 --until-step 11 "$work/tiny-recomputed.jsonl" "$work/tiny-bf16.jsonl"
else
  row tiny-recomputed FAIL "moe-run: $(tail -1 "$work/part.out")"
fi
# --trace from the device's events: every step's experts on the compute
# track.
if part tiny-trace 60 train "$bundle/artifacts/tiny-bf16.moebin" --steps 2 \
  --trace "$work/tiny-trace.json"; then
  compare "tiny-trace" "$python" test/moe-run/check_trace.py "$work/tiny-trace.json"
else
  row tiny-trace FAIL "moe-run: $(tail -1 "$work/part.out")"
fi
if part tiny-mb2 60 train "$bundle/artifacts/tiny-mb2.moebin" --steps 3 \
  --metrics "$work/tiny-mb2.jsonl"; then
  compare "tiny-mb2 3 steps" "$python" test/gpu/compare_runs.py \
    "$bundle/ref/tiny-mb2.jsonl" "$work/tiny-mb2.jsonl"
else
  row tiny-mb2 FAIL "moe-run: $(tail -1 "$work/part.out")"
fi
# A diverging run stops with the CPU's error: the step's checks on the
# device (StepCheck.h), read when the step ends, and no optimizer update.
if part diverge 60 train "$bundle/artifacts/diverge-bf16.moebin" --steps 20; then
  row diverge FAIL "moe-run went on past a non-finite loss"
elif found=$(grep -o 'error: step [0-9]*: [a-z ]* is not finite' "$work/part.out"); then
  row diverge ok "${found#error: }"
else
  row diverge FAIL "moe-run: $(tail -1 "$work/part.out")"
fi
if part mid-bf16 90 train "$bundle/artifacts/mid-bf16.moebin" --steps 3 \
  --metrics "$work/mid-bf16.jsonl"; then
  compare "mid-bf16 3 steps" "$python" test/gpu/compare_runs.py \
    "$bundle/ref/mid-bf16.jsonl" "$work/mid-bf16.jsonl"
else
  row mid-bf16 FAIL "moe-run: $(tail -1 "$work/part.out")"
fi

# --- 5. the benchmark and its peer --------------------------------------------
if [ "$device" = cuda ]; then
  gemm_rate=
  if part gemm-rate 60 "$python" test/gpu/gemm_rate.py; then
    gemm_rate=$(tail -1 "$work/part.out")
    row gemm-rate ok "$(awk '{printf "%.0f TFLOP/s BF16 8192^3 (torch.matmul)", $1 / 1e12}' <<< "$gemm_rate")"
  else
    row gemm-rate FAIL "$(tail -1 "$work/part.out")"
  fi
  bin moe-data synth --out "$work/bench-tokens.bin" --tokens 1000000 > /dev/null ||
    row bench-data FAIL "moe-data synth failed"
  for recipe in bf16 fp8; do
    name=gpu-moe-$recipe
    if part "$name" 120 bin moe-run "$bundle/artifacts/$name.moebin" \
      --data "$work/bench-tokens.bin" --steps 8 --device cuda --quiet --profile \
      --metrics "$work/$name.jsonl"; then
      cp "$work/part.out" "$work/$name-profile.txt"
      row "$name" ok "$("$python" test/gpu/bench_summary.py "$work/$name.jsonl" \
        --peak "$peak" --measured "${gemm_rate:-0}" 2>&1 | tail -1)"
      # The scratch the instructions took, against the plan's kernel
      # workspace (which includes cuBLASLt's 32 MiB).
      compare "$name scratch" "$python" test/gpu/check_scratch.py \
        "$work/$name.jsonl" "$bundle/ref/$name.memory"
    else
      row "$name" FAIL "moe-run: $(tail -1 "$work/part.out")"
    fi
  done
  bin moe-run --model-config "$bundle/artifacts/gpu-moe-bf16.moebin" > "$work/gpu-moe.json"
  if part torch-peer 150 python3 bench/gpu_torch_peer.py \
    --config "$work/gpu-moe.json" --data "$work/bench-tokens.bin" --steps 8 \
    --metrics "$work/torch-peer.jsonl"; then
    row torch-peer ok "$(tail -1 "$work/part.out")"
  else
    row torch-peer FAIL "$(tail -1 "$work/part.out")"
  fi
  "$python" test/gpu/bench_summary.py --compare "$work/gpu-moe-bf16.jsonl" \
    "$work/gpu-moe-fp8.jsonl" "$work/torch-peer.jsonl" \
    --profiles "$work/gpu-moe-bf16-profile.txt" "$work/gpu-moe-fp8-profile.txt" \
    >> "$summary" 2>&1 ||
    row ratios FAIL "see $summary"
fi

(cd "$work" && shopt -s nullglob && tar czf "$out/runs.tar.gz" ./*.jsonl ./*-profile.txt) ||
  row results FAIL "cannot pack the runs into $out/runs.tar.gz"
echo "===== summary ($((SECONDS))s)" | tee -a "$log"
cat "$summary"
exit $status
