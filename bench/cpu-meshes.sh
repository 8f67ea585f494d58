# Sourced by bench/cpu-cost.sh and bench/cpu-memory.sh: the CPU step model,
# its corpus in $out, the mpirun line, and the meshes both compare, at most
# 2 ranks (one per core on this machine).
# It reads the caller's arguments: --steps N replaces the caller's $steps.
#   usage: steps=N; out=DIR; source bench/cpu-meshes.sh
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N]" >&2; exit 2 ;;
  esac
done
[ -x build/bin/moe-run ] || scripts/setup.sh
mkdir -p "$out"
model=bench/models/cpu-step.mlir
batch=4
build/bin/moe-data synth --out "$out/corpus.bin" --tokens 400000 >/dev/null
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
# name|moec flags|ranks|the same plan as --plan-fix (global batch $batch)
meshes=(
  "1 rank||1|tp=1,pp=1,ep=1,mb=4,fsdp=0,remat=none"
  "dp=2|--mesh dp=2|2|tp=1,pp=1,ep=1,mb=2,fsdp=0,remat=none"
  "fsdp=2|--mesh fsdp=2|2|tp=1,pp=1,ep=1,mb=2,fsdp=1,remat=none"
  "tp=2|--mesh tp=2|2|tp=2,pp=1,ep=1,mb=4,fsdp=0,remat=none"
  "ep=2|--mesh dp=1,ep=2|2|tp=1,pp=1,ep=2,mb=2,fsdp=0,remat=none"
  "pp=2 (4 microbatches)|--pp 2 --microbatches 4|2|tp=1,pp=2,ep=1,mb=1,fsdp=0,remat=none,schedule=1f1b"
)
