#!/usr/bin/env bash
# Installs what moec needs (Debian bookworm packages), then configures and
# builds it into build/ with CMake + Ninja. Safe to run again: installed
# packages are skipped and the build is incremental (ccache).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ ccache lld python3 xz-utils
  libmlir-19-dev mlir-19-tools llvm-19 llvm-19-dev llvm-19-tools
  libabsl-dev libopenblas-dev libflatbuffers-dev flatbuffers-compiler openmpi-bin libopenmpi-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libprotobuf-dev protobuf-compiler libpng-dev
  libre2-dev libsentencepiece-dev libutf8proc-dev
  python3-numpy python3-torch python3-venv
  slurm-wlm munge
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

jobs=${MOE_BUILD_JOBS:-2}
if [ ! -f build/build.ninja ]; then
  cmake -G Ninja -S . -B build \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_USE_LINKER=lld \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py
fi
ninja -C build -j"$jobs"
