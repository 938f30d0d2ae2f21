//===- SanitizerOptions.cpp - defaults of a sanitized build's programs ----===//
//
// Part of mlt. Compiled into every executable of a build with MLT_SANITIZE
// (the top-level CMakeLists.txt adds it), so that each program runs with
// these defaults wherever it is started (lit, ctest, a shell, a fuzzer);
// ASAN_OPTIONS and UBSAN_OPTIONS still override them.
//
//===----------------------------------------------------------------------===//

extern "C" {

/// AddressSanitizer. allow_user_poisoning=0: LLVM's BumpPtrAllocator,
/// inlined from LLVM's headers into mlt's (instrumented) code, poisons the
/// slabs it allocates and unpoisons each allocation (ASan's manual
/// poisoning, on whenever the including code is instrumented); Debian's
/// libLLVM and libMLIR, which allocate from the same slabs (MLIR's
/// attribute and type storage), are not instrumented and unpoison nothing,
/// so every read of their allocations from mlt's code would be reported as
/// a use-after-poison. This turns that manual poisoning off, and only it:
/// ASan's own redzones, use-after-free and leak checks stay. The
/// symbolizer names functions and lines in reports.
const char *__asan_default_options() {
  return "allow_user_poisoning=0"
#ifdef MLT_LLVM_SYMBOLIZER
         ":external_symbolizer_path=" MLT_LLVM_SYMBOLIZER
#endif
      ;
}

/// UndefinedBehaviorSanitizer: with a stack (the build's
/// -fno-sanitize-recover stops the program at the first finding).
const char *__ubsan_default_options() { return "print_stacktrace=1"; }

} // extern "C"
