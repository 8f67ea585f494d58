#!/usr/bin/env bash
# The GPU check (issues 17 and 46), on the lent GPU machine: one call, under
# 7 minutes, from a tree that carries .gpu/ (test/gpu/prepare.sh, run here
# first). Nothing is built there: it has no MLIR, Abseil, FlatBuffers,
# OpenBLAS, MPI or GoogleTest, and nothing can be installed.
#
# The parts, in order, and each one's share of the call's deadline (400 s
# on a GPU; 800 s in a rehearsal, where the virtual GPU is far slower).
# run.sh reads the shares from this table; a part that overruns its share
# is killed and reported as failed, and the parts after it still get
# theirs: the shares sum to under the deadline, less a margin for what runs
# between parts (unpacking, the comparisons, packing the results).
#
#  | part            |  GPU s | rehearsal s | what it runs
#  | gpu             |     10 |         10 | nvidia-smi: the GPU, driver, clocks
#  | cuda-tests      |     10 |         10 | CudaTests: descriptors, no-device paths
#  | kernel-tests    |     40 |         90 | every kernel against its CPU twin,
#  |                 |        |            | NCCL on a communicator of one rank
#  | conformance     |     25 |         20 | the conformance suite's device half
#  | memcheck        |     40 |         50 | attention, router, routing kernel tests
#  |                 |        |            | under compute-sanitizer's memcheck
#  | tiny-bf16       |     15 |         40 | the tiny model, BF16: step 1 against the
#  | tiny-fp8        |     15 |         45 | CPU's dump, then its losses (FP8 experts:
#  | tiny-fp8b       |     15 |         40 | delayed, blockwise scaling)
#  | tiny-recomputed |     10 |         40 | up projections recomputed: kept's bits
#  | tiny-trace      |     10 |         40 | --trace: the experts on the compute track
#  | tiny-mb2        |     10 |         30 | two microbatches (gradient accumulation)
#  | diverge         |     10 |         25 | a non-finite loss stops with the CPU's error
#  | tiny-ep1        |     15 |         40 | expert parallelism on a mesh of one rank:
#  |                 |        |            | NCCL, CommStream, --expert-chunks 2
#  | mid-bf16        |     25 |         40 | bench/models/gpu-mid.mlir (81M parameters)
#  | gemm-rate       |     20 |         30 | PyTorch's BF16 GEMM rate
#  | gpu-moe-bf16    |     25 |         60 | the benchmark: median step, TFLOP/s, MFU,
#  | gpu-moe-fp8     |     25 |         60 | time per opcode, scratch against the plan
#  | torch-peer      |     35 |         45 | the same model in PyTorch (HF Mixtral)
#
# The GPU's shares sum to 355 s of 400, the rehearsal's to 715 of 800 (a
# tenth of the deadline is the margin). Each GPU share is an estimate, about
# twice what the part should take on an H100 (the benchmark's 8 steps of
# 16K tokens, the 30-step tiny runs, each binary's start; nothing has been
# timed on one yet); each rehearsal share about three times what the part
# took on a loaded two-core machine. On a GPU the parts are:
#
#   1. the GPU, driver and clocks
#   2. the CUDA tests: descriptors, every kernel against its CPU twin (NCCL's
#      collectives and all-to-all over a communicator of one rank among
#      them), the conformance suite's device half; compute-sanitizer's
#      memcheck on the attention, router and routing kernels
#   3. step 1 of the tiny model in BF16 and FP8 (delayed and blockwise
#      scaling) against the CPU's dump: every gradient and updated weight
#   4. 30 steps of the tiny model (BF16, FP8), 3 of it with two microbatches
#      (gradient accumulation), 5 of it compiled for a mesh of one
#      expert-parallel rank (moec --mesh ep=1) with --expert-chunks 2, and 3
#      of the mid-size model against the CPU's losses; a diverging run stops
#      with the CPU's error
#   5. bench/models/gpu-moe.mlir in BF16 and FP8: median step time, model
#      TFLOP/s and MFU against the datasheet peak and against a BF16 GEMM
#      rate measured in this run, time per opcode, the scratch the
#      instructions took against the memory plan's kernel workspace; the same
#      model as HF transformers' MixtralForCausalLM in PyTorch BF16 (SDPA),
#      the peer
#
# One GPU and several ranks: NCCL refuses two ranks on one GPU, and the
# machine has no MPI launcher. What one GPU does run of the multi-rank
# code: NCCL's communicator creation, split, collectives and row
# all-to-all on groups of one rank (kernel-tests' NcclKernelTest), and a
# whole training step over a mesh of one (tiny-ep1): the backend connects
# its groups, the experts take the expert-parallel path (counts agreed,
# rows packed, sent to and received from the rank itself over NCCL on the
# communication stream, in two chunks that overlap the experts' compute)
# and the trace shows the exchanges on the communication track. What needs
# several GPUs, and only test/gpu/mesh.test checks: sums over ranks that
# change the numbers, rows that leave the GPU, FSDP gathers, tensor
# parallelism, the reductions' second communicator inside a step.
#
# The libraries the machine provides (the CUDA runtime, cuBLAS(Lt), NCCL
# and the driver, named by the bundle's binaries) are searched for, each
# in the first of these that holds it, and the log says where each was
# found: the CUDA 13 wheels' nvidia/cu13/lib and the CUDA 12 wheels'
# nvidia/{cuda_runtime,cublas,nccl,cudnn}/lib (NCCL's and cuDNN's are there
# for CUDA 13 too), and nvidia/*/lib, in every site-packages that
# MOE_TORCH_PYTHON knows (found through its import machinery, without
# importing torch), $CUDA_HOME and /usr/local/cuda's lib64, lib and
# targets/*/lib, LD_LIBRARY_PATH, and the loader's cache (ldconfig -p).
#
# Results go to $OUT (the device tool's; bench/out/gpu elsewhere): log.txt,
# summary.txt (the table printed last) and runs.tar.gz (every run's
# metrics, the benchmarks' times per opcode). Exit 0 only if every part ran
# and passed; a part that cannot find what it needs fails loudly.
#
# Usage: test/gpu/run.sh [--rehearse]
#   --rehearse   on a machine without a GPU: the same parts on the virtual
#                GPU (lib/Runtime/VirtualGpu, an H100; moe-run --virtual-gpu
#                h100, VirtualGpuKernelTests, the conformance suite with
#                MOE_VIRTUAL_GPU=h100; the virtual GPU's own memory checks
#                and another seed's schedule in place of compute-sanitizer;
#                PyTorch's CPU for the GEMM rate and the peer), with the
#                work scaled down, which the summary's first line and the
#                rows say: 2 tiny steps instead of 30 (the last against
#                the other seeds' spread instead of the last 10), 2
#                recomputed instead of 10, 1 traced, 1 with microbatches, 2
#                on the mesh of one, 1 of a one-layer model of the mid-size
#                model's widths (test/gpu/Inputs/rehearse-mid.mlir) in its
#                place, a 256^3 GEMM rate, and in the benchmark's place one
#                all-MoE layer of the tiny model's widths
#                (test/gpu/Inputs/rehearse-bench.mlir; 2 steps, 1 of
#                warm-up). It checks the bundle, the references and this
#                script, and every comparison meets a device's numbers,
#                before a lease is spent on them.
# Environment: MOE_GPU_BUNDLE (.gpu), MOE_GPU_CHECK_SECONDS (the deadline),
#   MOE_PEAK_FLOPS (989e12), MOE_PYTHON (numpy's python3), MOE_TORCH_PYTHON
#   (python3 with PyTorch 2.1.1 or later, for SDPA, and HF transformers).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
script=$root/test/gpu/run.sh
bundle=$(realpath -m "${MOE_GPU_BUNDLE:-$root/.gpu}")
rehearse=0
if [ $# -gt 1 ] || { [ $# -eq 1 ] && [ "$1" != --rehearse ]; }; then
  echo "run.sh: error: unknown arguments '$*' (known: --rehearse)" >&2
  exit 2
fi
[ $# -eq 1 ] && rehearse=1
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
peak=${MOE_PEAK_FLOPS:-989e12}
# The comparisons need numpy (the lent machine's python3 has it); the GEMM
# rate and the peer need PyTorch (and HF transformers).
python=${MOE_PYTHON:-python3}
torch_python=${MOE_TORCH_PYTHON:-python3}
status=0

say() { echo "$*" | tee -a "$log"; }
# One row of the summary: part, verdict, detail.
row() {
  printf '%-28s %-5s %s\n' "$1" "$2" "$3" >> "$summary"
  say "run.sh: $1: $2 $3"
  [ "$2" = ok ] || [ "$2" = skip ] || status=1
}

# --- the shares ----------------------------------------------------------------
declare -A share
order=()
column=3
[ "$rehearse" -eq 1 ] && column=4
while IFS='|' read -r _ name gpu_s rehearsal_s _; do
  name=${name// /}
  [ -n "$name" ] || continue
  seconds=$(echo "$gpu_s $rehearsal_s" | awk -v c=$((column - 2)) '{print $c}')
  share[$name]=$seconds
  order+=("$name")
done < <(sed -n '/^#  | part /,/^#$/p' "$script" | tail -n +2 | sed 's/^#//')
if [ "$rehearse" -eq 1 ]; then
  deadline_s=${MOE_GPU_CHECK_SECONDS:-800}
else
  deadline_s=${MOE_GPU_CHECK_SECONDS:-400}
fi
# What runs between the parts: unpacking, about 20 comparisons, packing.
margin_s=$((deadline_s / 10))
total_s=0
for name in "${order[@]}"; do
  [[ ${share[$name]} =~ ^[1-9][0-9]*$ ]] || {
    echo "run.sh: error: the header's share of $name is '${share[$name]}', not a number of seconds" >&2
    exit 2
  }
  total_s=$((total_s + share[$name]))
done
if [ "${#order[@]}" -eq 0 ]; then
  echo "run.sh: error: no table of shares in the header (a line '#  | part ' and the rows after it)" >&2
  exit 2
fi
if [ $((total_s + margin_s)) -gt "$deadline_s" ]; then
  echo "run.sh: error: the shares in the header (${#order[@]} parts) sum to ${total_s}s: with a ${margin_s}s margin that is over the ${deadline_s}s deadline" >&2
  exit 2
fi
deadline=$((SECONDS + deadline_s))
# part NAME COMMAND...: COMMAND under `timeout`, at most NAME's share and
# never past the deadline; its output goes to the log and to part.out.
part() {
  local name=$1
  shift
  local cap=${share[$name]:-}
  if [ -z "$cap" ]; then
    row "$name" FAIL "not run: the header's table gives it no share"
    return 1
  fi
  local left=$((deadline - SECONDS))
  if [ "$left" -le 5 ]; then
    row "$name" FAIL "not run: the call's deadline has passed"
    return 1
  fi
  [ "$left" -lt "$cap" ] && cap=$left
  say "=== $name (at most ${cap}s)"
  local start=$SECONDS
  # Through bash: COMMAND may be one of this script's functions (exported).
  timeout -k 5 "$cap" bash -c '"$@"' "$name" "$@" > "$work/part.out" 2>&1
  local rc=$?
  cat "$work/part.out" >> "$log"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "run.sh: $name: killed after its share of ${cap}s"
    echo "killed after its share of ${cap}s" >> "$work/part.out"
  fi
  say "--- $name: exit $rc in $((SECONDS - start))s of ${cap}s"
  return $rc
}

# --- the scale -----------------------------------------------------------------
if [ "$rehearse" -eq 1 ]; then
  say "run.sh: rehearsal on the virtual GPU (an H100), work scaled down: see the rows"
  printf 'rehearsal on the virtual GPU (h100), scaled down; shares of %ss\n' "$deadline_s" >> "$summary"
  tiny_steps=2 late_steps=1 recomputed_steps=2 trace_steps=1 mb2_steps=1
  ep1_steps=2 mid_steps=1 bench_steps=2 bench_warmup=1 gemm_size=256
  # The stand-ins (test/gpu/Inputs): the mid-size model's widths in one
  # small layer, and the benchmark's form at the tiny model's widths.
  mid=rehearse-mid bench=rehearse torch_device=cpu
  scaled=" (rehearsal)"
else
  tiny_steps=30 late_steps=10 recomputed_steps=10 trace_steps=2 mb2_steps=3
  ep1_steps=5 mid_steps=3 bench_steps=8 bench_warmup=2 gemm_size=8192
  mid=mid-bf16 bench=gpu-moe torch_device=cuda
  scaled=
fi

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
loader=$tools/lib/ld-linux-x86-64.so.2
# The libraries of the bundle's binaries (prepare.sh's `provided`): with
# --library-path DIRS, NAME PATH each (PATH "not" when not found).
provided='^(libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libcudnn[a-z_]*\.so)'
resolved() {
  local elf
  for elf in "$tools"/bin/* "$tools"/lib/libmoe_backend_*.so; do
    "$loader" --library-path "$1" --list "$elf" 2>&1
  done | awk -v ok="$provided" '$2 == "=>" && $1 ~ ok { print $1, $3 }' | sort -u
}
# The places to look, in order, each with what it is.
candidates=()
add_candidate() { [ -d "$1" ] && candidates+=("$1|$2"); }
# Every site-packages python3 knows, through its import machinery (the
# `nvidia` namespace package's directories, else sys.path), without
# importing torch or anything else that holds the libraries open.
while read -r dir; do
  add_candidate "$dir/cu13/lib" "CUDA 13 wheels, $dir/cu13/lib"
  for package in cuda_runtime cublas nccl cudnn; do
    add_candidate "$dir/$package/lib" "wheels, $dir/$package/lib"
  done
  for lib in "$dir"/*/lib; do
    add_candidate "$lib" "wheels, $lib"
  done
done < <(timeout 30 "$torch_python" - 2> /dev/null << 'EOF'
import importlib.util, os, sys
found = []
try:
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        found += list(spec.submodule_search_locations)
except (ImportError, ValueError):
    pass
found += [os.path.join(p, "nvidia") for p in sys.path if p]
seen = set()
for d in found:
    d = os.path.realpath(d)
    if d not in seen and os.path.isdir(d):
        seen.add(d)
        print(d)
EOF
)
for cuda in ${CUDA_HOME:+"$CUDA_HOME"} /usr/local/cuda; do
  add_candidate "$cuda/lib64" "the toolkit, $cuda/lib64"
  add_candidate "$cuda/lib" "the toolkit, $cuda/lib"
  for lib in "$cuda"/targets/*/lib; do
    add_candidate "$lib" "the toolkit, $lib"
  done
done
IFS=: read -ra ld_dirs <<< "${LD_LIBRARY_PATH:-}"
for dir in "${ld_dirs[@]}"; do
  [ -n "$dir" ] && add_candidate "$dir" "LD_LIBRARY_PATH, $dir"
done
cache=$(ldconfig -p 2> /dev/null || /sbin/ldconfig -p 2> /dev/null)
libpath=$tools/lib
where=
for name in $(resolved "$tools/lib" | awk '{ print $1 }' | sort -u); do
  found=
  for candidate in "${candidates[@]}"; do
    dir=${candidate%%|*}
    if [ -e "$dir/$name" ]; then
      found="$dir|${candidate#*|}"
      break
    fi
  done
  if [ -z "$found" ]; then
    path=$(echo "$cache" | awk -v n="$name" '$1 == n && $2 ~ /x86-64/ { print $NF; exit }')
    [ -n "$path" ] && found="$(dirname "$path")|the loader's cache (ldconfig -p), $path"
  fi
  if [ -n "$found" ]; then
    say "run.sh: $name: ${found#*|}"
    dir=${found%%|*}
    [[ ":$libpath:" == *":$dir:"* ]] || libpath=$libpath:$dir
    where="${where:+$where; }${name%%.so*}: ${found#*|}"
  else
    say "run.sh: $name: in none of the places searched"
  fi
done
# Each binary through the bundle's loader: glibc and the rest from its lib/,
# whatever the machine's own distribution is. (The CUDA modules are found
# beside it: Registry.cpp looks in lib/ next to the executable's bin/, and
# the executable is then the loader, in lib/ itself.)
bin() {
  local name=$1
  shift
  "$loader" --library-path "$libpath" "$tools/bin/$name" "$@"
}
export -f bin
export loader libpath tools
missing=$(resolved "$libpath" | awk '$2 == "not" { print $1 }' | tr '\n' ' ')
if [ -n "$missing" ]; then
  row libraries FAIL "not found: $missing(searched: the wheels' nvidia/cu13/lib and nvidia/*/lib, CUDA_HOME and /usr/local/cuda, LD_LIBRARY_PATH, ldconfig -p)"
else
  row libraries ok "$where"
fi

# --- 1. the machine -----------------------------------------------------------
if [ "$rehearse" -eq 0 ]; then
  if part gpu nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv; then
    row gpu ok "$(tail -1 "$work/part.out")"
  else
    row gpu FAIL "nvidia-smi found no GPU"
    cat "$summary"
    exit 1
  fi
else
  # The virtual GPU, as the kernel tests report it, and its module.
  if ! [ -f "$tools/lib/libmoe_backend_virtual_gpu.so" ]; then
    row gpu FAIL "the bundle lacks the virtual GPU's module (lib/libmoe_backend_virtual_gpu.so)"
  elif part gpu env MOE_VIRTUAL_GPU=h100 bash -c 'bin VirtualGpuKernelTests --gtest_filter=-*' &&
    grep -q '^device 0: .*(virtual)' "$work/part.out"; then
    row gpu ok "$(grep -m1 '^device 0: ' "$work/part.out")"
  else
    row gpu FAIL "the virtual GPU did not come up: $(tail -1 "$work/part.out")"
  fi
fi

# --- 2. the CUDA tests --------------------------------------------------------
# gtest NAME SKIPS BINARY ARGS...: a GoogleTest binary as a part; SKIPS
# is skips-ok where a test may skip for the GPU's kind (FP8 on sm_80), else
# no-skips (the conformance suite skips when it has no device).
gtest() {
  local name=$1 skips=$2
  shift 2
  part "$name" bin "$@" --gtest_brief=1
  local rc=$?
  local tally
  tally=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/part.out" | tr -s ' ' | tr '\n' ' ')
  if [ "$rc" -eq 0 ] && { [ "$skips" = skips-ok ] || ! grep -q '^\[  SKIPPED ' "$work/part.out"; }; then
    row "$name" ok "$tally"
  else
    row "$name" FAIL "exit $rc $tally$(grep -m3 -E '^\[  (FAILED|SKIPPED) *\] [A-Za-z]' "$work/part.out" | tr -s ' ' | tr '\n' ' ')$(tail -1 "$work/part.out" | grep killed)"
  fi
}
conformance_filter='Backends/ConformanceTest.EveryOpcode/cuda:ConformanceBf16.*'
memcheck_filter='*AttentionKernelTest*:*RouterKernelTest*:*ExpertRoutingKernelTest*'
# Without a device CudaTests checks the paths that fail cleanly; with one,
# those that need none.
part_cuda_tests() {
  part cuda-tests bin CudaTests --gtest_brief=1
  local rc=$?
  local tally
  tally=$(grep -E '^\[  (PASSED|FAILED) ' "$work/part.out" | tr -s ' ' | tr '\n' ' ')
  if [ "$rc" -eq 0 ]; then
    row cuda-tests ok "$tally"
  else
    row cuda-tests FAIL "exit $rc $tally$(tail -1 "$work/part.out" | grep killed)"
  fi
}
part_cuda_tests
if [ "$rehearse" -eq 0 ]; then
  gtest kernel-tests skips-ok CudaKernelTests
  gtest conformance no-skips ConformanceTests --gtest_filter="$conformance_filter"
  if ! command -v compute-sanitizer > /dev/null; then
    row memcheck FAIL "compute-sanitizer is not on PATH"
  elif part memcheck compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$loader" --library-path "$libpath" "$tools/bin/CudaKernelTests" --gtest_brief=1 \
    --gtest_filter="$memcheck_filter"; then
    row memcheck ok "$(grep -m1 'ERROR SUMMARY' "$work/part.out")"
  else
    row memcheck FAIL "$(grep -m1 'ERROR SUMMARY' "$work/part.out" || tail -1 "$work/part.out")"
  fi
else
  export MOE_VIRTUAL_GPU=h100
  gtest kernel-tests no-skips VirtualGpuKernelTests
  gtest conformance no-skips ConformanceTests --gtest_filter="$conformance_filter"
  # compute-sanitizer's place: the virtual GPU faults on every access
  # outside live memory, shared memory's guard bands included, and under
  # another seed its blocks, threads and streams run in another order.
  MOE_VIRTUAL_GPU_SEED=46 gtest memcheck no-skips VirtualGpuKernelTests --gtest_filter="$memcheck_filter"
  unset MOE_VIRTUAL_GPU
fi

# --- 3 and 4. training against the CPU ----------------------------------------
data=$bundle/data/synth.bin
device_flags="--device cuda"
[ "$rehearse" -eq 1 ] && device_flags="--device cuda --virtual-gpu h100"
train() {
  # shellcheck disable=SC2086 # $device_flags is flags and their values
  bin moe-run "$@" --data "$data" $device_flags --quiet
}
export -f train
export data device_flags
# compare NAME COMMAND...: a comparison's verdict, its last line the detail.
compare() {
  local name=$1
  shift
  if "$@" > "$work/compare.out" 2>&1; then
    row "$name" ok "$(tail -1 "$work/compare.out")$scaled"
  else
    row "$name" FAIL "$(tail -1 "$work/compare.out")"
  fi
  cat "$work/compare.out" >> "$log"
}
# firsts N FILE: FILE's first N steps, in the scratch directory (its name
# there is FILE's, with the directory's name before it).
firsts() {
  local to
  to=$work/ref-$(basename "$(dirname "$2")")-$(basename "$2")
  head -n "$1" "$2" > "$to"
  echo "$to"
}
# failed NAME: a training part that failed, its last line the detail.
failed() {
  row "$1" FAIL "moe-run: $(tail -1 "$work/part.out")"
}
for recipe in bf16 fp8 fp8b; do
  name=tiny-$recipe
  if part "$name" train "$bundle/artifacts/$name.moebin" --steps "$tiny_steps" \
    --metrics "$work/$name.jsonl" --dump-step "$work/$name-step1"; then
    compare "$name step 1" "$python" test/gpu/compare_dumps.py \
      "$bundle/ref/$name-step1" "$work/$name-step1"
    seeds=()
    for seed in "$bundle"/ref/"$name"-seed*.jsonl; do
      seeds+=("$(firsts "$tiny_steps" "$seed")")
    done
    compare "$name $tiny_steps steps" "$python" test/gpu/compare_runs.py \
      "$(firsts "$tiny_steps" "$bundle/ref/$name.jsonl")" "$work/$name.jsonl" \
      --late-steps "$late_steps" --other-seeds "${seeds[@]}"
  else
    failed "$name"
  fi
done
# Keeping the experts' up projections gives the bits of recomputing them,
# on the device too (the same GEMMs on the same inputs).
if part tiny-recomputed train "$bundle/artifacts/tiny-bf16-recomputed.moebin" \
  --steps "$recomputed_steps" --metrics "$work/tiny-recomputed.jsonl"; then
  compare "tiny kept vs recomputed" "$python" test/moe-run/compare_losses.py \
    --keys loss,grad_norm --rtol 0 --until-step $((recomputed_steps + 1)) "$work/tiny-recomputed.jsonl" \
    "$work/tiny-bf16.jsonl"
else
  failed tiny-recomputed
fi
# --trace from the device's events: every step's experts on the compute
# track.
if part tiny-trace train "$bundle/artifacts/tiny-bf16.moebin" --steps "$trace_steps" \
  --trace "$work/tiny-trace.json"; then
  compare "tiny-trace" "$python" test/moe-run/check_trace.py "$work/tiny-trace.json"
else
  failed tiny-trace
fi
if part tiny-mb2 train "$bundle/artifacts/tiny-mb2.moebin" --steps "$mb2_steps" \
  --metrics "$work/tiny-mb2.jsonl"; then
  compare "tiny-mb2 $mb2_steps steps" "$python" test/gpu/compare_runs.py \
    "$(firsts "$mb2_steps" "$bundle/ref/tiny-mb2.jsonl")" "$work/tiny-mb2.jsonl"
else
  failed tiny-mb2
fi
# A diverging run stops with the CPU's error: the step's checks on the
# device (StepCheck.h), read when the step ends, and no optimizer update.
if part diverge train "$bundle/artifacts/diverge-bf16.moebin" --steps 20; then
  row diverge FAIL "moe-run went on past a non-finite loss"
elif found=$(grep -o 'error: step [0-9]*: [a-z ]* is not finite' "$work/part.out"); then
  row diverge ok "${found#error: }"
else
  failed diverge
fi
# Expert parallelism on one GPU: the tiny model compiled for a mesh of one
# expert-parallel rank (its CPU run is the plain one's, bit for bit) runs
# the expert-parallel path, its exchanges over NCCL on the communication
# stream in two chunks; its losses follow the CPU's as the plain run's do,
# and the trace shows the exchanges on the communication track.
if part tiny-ep1 train "$bundle/artifacts/tiny-bf16-ep1.moebin" --steps "$ep1_steps" \
  --expert-chunks 2 --metrics "$work/tiny-ep1.jsonl" --trace "$work/tiny-ep1-trace.json"; then
  compare "tiny-ep1 $ep1_steps steps" "$python" test/gpu/compare_runs.py \
    "$(firsts "$ep1_steps" "$bundle/ref/tiny-bf16.jsonl")" "$work/tiny-ep1.jsonl"
  compare "tiny-ep1 exchanges" "$python" test/moe-run/check_trace.py \
    --track communication --prefix Experts --prefix ExpertsGrad --at-least 1 \
    "$work/tiny-ep1-trace.json"
else
  failed tiny-ep1
fi
if part mid-bf16 train "$bundle/artifacts/$mid.moebin" --steps "$mid_steps" \
  --metrics "$work/mid-bf16.jsonl"; then
  compare "mid-bf16 $mid_steps steps" "$python" test/gpu/compare_runs.py \
    "$(firsts "$mid_steps" "$bundle/ref/$mid.jsonl")" "$work/mid-bf16.jsonl"
else
  failed mid-bf16
fi

# --- 5. the benchmark and its peer --------------------------------------------
# The rehearsal's benchmark is a tiny all-MoE model (artifacts/rehearse-*):
# the virtual GPU would take hours over a step of gpu-moe.
gemm_rate=
if part gemm-rate "$torch_python" test/gpu/gemm_rate.py --device "$torch_device" \
  --size "$gemm_size"; then
  gemm_rate=$(tail -1 "$work/part.out")
  row gemm-rate ok "$(awk -v n="$gemm_size" -v d="$torch_device" '{printf "%.3g TFLOP/s BF16 %d^3 (torch.matmul, %s)", $1 / 1e12, n, d}' <<< "$gemm_rate")$scaled"
else
  row gemm-rate FAIL "$(tail -1 "$work/part.out")"
fi
bin moe-data synth --out "$work/bench-tokens.bin" --tokens 1000000 > /dev/null ||
  row bench-data FAIL "moe-data synth failed"
for recipe in bf16 fp8; do
  name=gpu-moe-$recipe
  # shellcheck disable=SC2086 # $device_flags is flags and their values
  if part "$name" bin moe-run "$bundle/artifacts/$bench-$recipe.moebin" \
    --data "$work/bench-tokens.bin" --steps "$bench_steps" $device_flags --quiet --profile \
    --metrics "$work/$name.jsonl"; then
    cp "$work/part.out" "$work/$name-profile.txt"
    row "$name" ok "$("$python" test/gpu/bench_summary.py "$work/$name.jsonl" \
      --warmup "$bench_warmup" --peak "$peak" --measured "${gemm_rate:-0}" 2>&1 | tail -1)$scaled"
    # The scratch the instructions took, against the plan's kernel
    # workspace (which includes cuBLASLt's 32 MiB).
    compare "$name scratch" "$python" test/gpu/check_scratch.py \
      "$work/$name.jsonl" "$bundle/ref/$bench-$recipe.memory"
  else
    failed "$name"
  fi
done
bin moe-run --model-config "$bundle/artifacts/$bench-bf16.moebin" > "$work/gpu-moe.json"
if part torch-peer "$torch_python" bench/gpu_torch_peer.py --device "$torch_device" \
  --config "$work/gpu-moe.json" --data "$work/bench-tokens.bin" --steps "$bench_steps" \
  --warmup "$bench_warmup" --metrics "$work/torch-peer.jsonl"; then
  row torch-peer ok "$(tail -1 "$work/part.out")$scaled"
else
  row torch-peer FAIL "$(tail -1 "$work/part.out")"
fi
if ! "$python" test/gpu/bench_summary.py --warmup "$bench_warmup" \
  --compare "$work/gpu-moe-bf16.jsonl" "$work/gpu-moe-fp8.jsonl" "$work/torch-peer.jsonl" \
  --profiles "$work/gpu-moe-bf16-profile.txt" "$work/gpu-moe-fp8-profile.txt" \
  > "$work/ratios.out" 2>&1; then
  row ratios FAIL "$(tail -1 "$work/ratios.out")"
  cat "$work/ratios.out" >> "$log"
else
  cat "$work/ratios.out" >> "$summary"
fi

(cd "$work" && shopt -s nullglob && tar czf "$out/runs.tar.gz" ./*.jsonl ./*-profile.txt) ||
  row results FAIL "cannot pack the runs into $out/runs.tar.gz"
echo "===== summary ($((SECONDS))s of ${deadline_s}s)" | tee -a "$log"
cat "$summary"
exit $status
