#!/usr/bin/env bash
# How fast does moe-run check a token file against the vocabulary at
# start-up (issue 14, docs/data.md)? Writes a flat uint16 file of N tokens
# (default 10^9, 2 GB) whose last id is outside the tiny model's vocabulary,
# so that the run stops at the check, and times moe-run on it against the
# same start-up on a file of 1000 tokens (the baseline, measured in the same
# run): the difference is the check. Median of --runs runs, with the file in
# the page cache after the first.
#   bench/vocab-check.sh [--runs N] [--tokens N]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3 tokens=1000000000
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    *) echo "usage: bench/vocab-check.sh [--runs N] [--tokens N]" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build/bin/moec models/tiny.mlir -o "$out/tiny.moebin"
# Zeros are valid ids; one id 256 at the end is not.
write() {
  head -c $(( ($1 - 1) * 2 )) /dev/zero > "$2"
  printf '\x00\x01' >> "$2"
}
write "$tokens" "$out/large.bin"
write 1000 "$out/small.bin"
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
seconds() {
  local start end
  start=$(date +%s.%N)
  if build/bin/moe-run "$out/tiny.moebin" --data "$1" --steps 1 --quiet 2> "$out/err"; then
    echo "vocab-check: moe-run did not stop at the check" >&2; exit 1
  fi
  grep -q "is outside the vocabulary" "$out/err" || { cat "$out/err" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
cat "$out/large.bin" > /dev/null
large=$(for _ in $(seq "$runs"); do seconds "$out/large.bin"; done | median)
small=$(for _ in $(seq "$runs"); do seconds "$out/small.bin"; done | median)
python3 -c "
tokens, large, small = $tokens, $large, $small
check = max(large - small, 1e-9)
print(f'{tokens} uint16 tokens ({2 * tokens / 1e9:.2f} GB): start-up {large:.3f} s, '
      f'baseline {small:.3f} s, check {check:.3f} s, {2 * tokens / check / 1e9:.1f} GB/s')"
