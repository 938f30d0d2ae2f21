# Shared by gpu-suite.sh and gpu-multi.sh (sourced, not run): the part of
# `pack` both do on the build machine. pack_runtime ROOT RUNTIME_BUILD DIR
# FIXTURE builds the runtime-only mlt-run and the GPU tests (CUDA, NCCL and
# MPI, no LLVM) in RUNTIME_BUILD and lays DIR out afresh: bin/ (stripped),
# lib/ (the OpenBLAS libraries the GPU machine lacks), fixtures/ (FIXTURE),
# tools/fixture_tools.py and plans/tokens.u16 (the fixture's token stream).
pack_runtime() {
  local root=$1 rt=$2 dir=$3 fixture=$4
  cmake -G Ninja -S "$root" -B "$rt" -DMLT_ENABLE_COMPILER=OFF -DMLT_ENABLE_CUDA=ON >/dev/null
  ninja -C "$rt" mlt-run MLTRuntimeCUDATests
  rm -rf "$dir" && mkdir -p "$dir"/{bin,lib,plans,fixtures,tools}
  cp "$rt"/bin/mlt-run "$rt"/bin/MLTRuntimeCUDATests "$dir"/bin/
  strip "$dir"/bin/*
  local lib
  for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
    cp -L "$(ldd "$rt"/bin/mlt-run | awk -v l=$lib '$1 == l {print $3}')" "$dir"/lib/
  done
  cp -r "$fixture" "$dir"/fixtures/
  cp "$root"/test/Training/fixture_tools.py "$dir"/tools/
  python3 "$root"/test/Training/fixture_tools.py tokens "$fixture" "$dir"/plans/tokens.u16
}

# finish_pack ROOT DIR SCRIPT: the benchmark's tools (bench/gpu_bench.py and
# the PyTorch reference) and SCRIPT itself into DIR, and the line that says
# how to run it there.
finish_pack() {
  local root=$1 dir=$2 script=$3
  cp "$root"/bench/gpu_bench.py "$root"/../shared/bench/hf_llama_bench.py "$dir"/tools/
  cp "$script" "$dir"/
  echo "packed $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: bash $dir/$(basename "$script") run"
}
