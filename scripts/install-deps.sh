#!/usr/bin/env bash
# Installs everything mlt needs to build and test on Debian 12 (bookworm): the
# Debian packages with apt-get, and the Python packages of mlt-tokenize
# (scripts/requirements.txt, pinned) with `python3 -m pip` for the python3 on
# PATH. Idempotent: packages already installed are not touched, and nothing is
# downloaded when all are present.
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
  # checkpoints' content checksums: XXH3 (header-only use of libxxhash-dev),
  # and xxhsum, with which users and the tests check a shard by hand
  libxxhash-dev xxhash
  # plan files: FlatBuffers schema compiler and headers
  flatbuffers-compiler libflatbuffers-dev
  # unit tests
  libgtest-dev
  # MPI (Open MPI, with mpirun) starts runs of one process per GPU; built with
  # the CUDA backend, and its error paths are tested without a GPU
  libopenmpi-dev
  # CI's sanitized build and fuzzers (MLT_SANITIZE, MLT_ENABLE_FUZZERS): clang
  # with its AddressSanitizer, UBSan and libFuzzer runtimes, llvm-symbolizer
  clang-22 libclang-rt-22-dev llvm-22
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
else
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    echo "install-deps: run as root (missing: ${missing[*]})" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python packages: skipped when python3 imports each at its pinned version.
requirements="$(dirname "$0")/requirements.txt"
if python3 - "$requirements" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, pinned = line.split("==")
    try:
        if version(name) != pinned:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
then
  echo "install-deps: the Python packages are installed ($(python3 -c 'import sys; print(sys.executable)'))"
else
  echo "install-deps: installing the Python packages of $requirements"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "install-deps: python3 has no pip; installing python3-pip"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends python3-pip
  fi
  # A Debian python3 is "externally managed" (PEP 668): pip installs into it
  # only when told to, which is what this machine-wide setup wants.
  pip_flags=(-q --disable-pip-version-check --root-user-action=ignore)
  if [ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
    pip_flags+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_flags[@]}" -r "$requirements"
fi
echo "install-deps: done"
