# Shared by gpu-suite.sh, gpu-multi.sh and bench/*_gpu.sh (sourced, not
# run): the part of `pack` they all do on the build machine.
#
# pack_runtime ROOT RUNTIME_BUILD DIR FIXTURE builds the runtime-only mlt-run and the GPU tests (CUDA, NCCL and
# MPI, no LLVM) in RUNTIME_BUILD and lays DIR out afresh: bin/ (stripped),
# lib/ (the OpenBLAS libraries the GPU machine lacks), fixtures/ (FIXTURE),
# tools/fixture_tools.py and plans/tokens.u16 (the fixture's token stream).
pack_runtime() {
  local root=$1 rt=$2 dir=$3 fixture=$4
  MLT_RUNTIME_BUILD=$rt pack_binaries "$root" "$dir" mlt-run MLTRuntimeCUDATests || return 1
  mkdir -p "$dir"/{fixtures,tools}
  cp -r "$fixture" "$dir"/fixtures/
  cp "$root"/test/Training/fixture_tools.py "$dir"/tools/
  python3 "$root"/test/Training/fixture_tools.py tokens "$fixture" "$dir"/plans/tokens.u16
}

# pack_binaries ROOT DIR TARGET...: builds TARGETs of the runtime-only
# CUDA build (MLT_RUNTIME_BUILD, default ROOT/build-runtime-cuda) and lays
# DIR out afresh: bin/ (the TARGETs, stripped), lib/ (the OpenBLAS
# libraries the GPU machine lacks), plans/ (empty), and this file. What
# every bench/*_gpu.sh's pack and pack_runtime start from.
pack_binaries() {
  local root=$1 dir=$2 rt=${MLT_RUNTIME_BUILD:-$1/build-runtime-cuda}
  shift 2
  cmake -G Ninja -S "$root" -B "$rt" -DMLT_ENABLE_COMPILER=OFF -DMLT_ENABLE_CUDA=ON >/dev/null ||
    return 1
  ninja -C "$rt" "$@" || return 1
  rm -rf "$dir" && mkdir -p "$dir"/{bin,lib,plans}
  local target lib
  for target in "$@"; do cp "$rt"/bin/"$target" "$dir"/bin/; done
  strip "$dir"/bin/*
  for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
    cp -L "$(ldd "$rt"/bin/mlt-run | awk -v l=$lib '$1 == l {print $3}')" "$dir"/lib/
  done
  cp "$root"/scripts/gpu-pack-common.sh "$dir"/
}

# finish_pack ROOT DIR SCRIPT: the benchmark's tools (bench/gpu_bench.py and
# the PyTorch reference), the tuned cuBLASLt tables (calibration/matmuls, as
# DIR/matmuls) and SCRIPT itself into DIR, and the line that says how to run
# it there.
finish_pack() {
  local root=$1 dir=$2 script=$3
  cp "$root"/bench/gpu_bench.py "$root"/../shared/bench/hf_llama_bench.py "$dir"/tools/
  cp -r "$root"/calibration/matmuls "$dir"/
  cp "$script" "$dir"/
  echo "packed $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: bash $dir/$(basename "$script") run"
}

# gpu_env (on the GPU machine, in the carry's folder): NCCL_NVLS_ENABLE=0
# (these machines need it), the carried libraries and Open MPI's
# libmpi.so.40 (the machine's own, next to its mpirun) on the library path,
# and $mpirun, the launcher line every multi-GPU run uses.
gpu_env() {
  export NCCL_NVLS_ENABLE=0
  export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  if ! ldconfig -p | grep -q 'libmpi\.so\.40 '; then
    local mpidir
    mpidir=$(dirname "$(readlink -f "$(command -v mpirun)")")/../lib
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$mpidir
  fi
  mpirun="mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
}

# pack_start DIR TARGET... (with $root the source tree): stops at the first
# failure; $dir, DIR made absolute, holds the runtime's TARGETs
# (pack_binaries).
pack_start() {
  set -e
  dir=$(realpath -m "$1")
  shift
  pack_binaries "$root" "$dir" "$@"
}

# packed DIR SCRIPT [HOW]: SCRIPT copied into DIR, and the line that says
# how to run it there (HOW: its arguments on the GPU machine).
packed() {
  local dir=$1 script=$2 how=${3:-}
  cp "$script" "$dir"/
  echo "packed $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: bash $dir/$(basename "$script")${how:+ $how}"
}

# gpu_start (on the GPU machine, in the carry's folder): gpu_env, $out
# ($OUT, else ./out) made, and `fail MESSAGE`, which prints it and sets
# $status to 1 (0 until then), for the scripts' checks.
gpu_start() {
  out=${OUT:-$PWD/out}
  mkdir -p "$out"
  gpu_env
  status=0
  fail() { echo "FAIL: $*"; status=1; }
}

# random_tokens FILE: 2^20 random token ids below 32000 (u16), the data of
# the speed runs (seeded: every run reads the same).
random_tokens() {
  python3 - "$1" <<'PY'
import random, struct, sys
random.seed(0)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<%dH" % (1 << 20), *(random.randrange(32000) for _ in range(1 << 20))))
PY
}
