#!/usr/bin/env bash
# Installs everything mlt needs to build and test on Debian 12 (bookworm), with
# apt-get only. Idempotent: packages already installed are not touched, and
# nothing is downloaded when all are present.
#
# Usage: scripts/install-deps.sh            (as root, or with sudo available)
#
# The CUDA 13 toolkit (nvcc, cuBLASLt, NCCL) is not a Debian package; when nvcc
# is found (PATH or /usr/local/cuda/bin) the CUDA backend is built (with NCCL
# from the toolkit and Open MPI from Debian), else skipped.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build git python3
  # LLVM/MLIR 22: libraries, TableGen, FileCheck and lit
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  # runtime: BLAS for the CPU backend, JSON for safetensors headers and metrics
  libopenblas-dev nlohmann-json3-dev
  # plan files: FlatBuffers schema compiler and headers
  flatbuffers-compiler libflatbuffers-dev
  # unit tests
  libgtest-dev
  # MPI (Open MPI, with mpirun) starts runs of one process per GPU; built with
  # the CUDA backend, and its error paths are tested without a GPU
  libopenmpi-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
