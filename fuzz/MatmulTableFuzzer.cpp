//===- MatmulTableFuzzer.cpp - libFuzzer target: tuned matmul tables ------===//
//
// Part of mlt. Reads each input as a table of tuned cuBLASLt algorithms
// (MatmulTable::parse, what `mlt-run --matmul-algorithms FILE` reads before
// any product runs), as made on the device the seeds name
// (calibration/matmuls/h100.json), so mutations reach the entries. A table
// that parses must survive a round trip: written again (toJson), it parses
// to the same text, entry for entry. Any crash, hang, leak, undefined
// behaviour or allocation past -malloc_limit_mb is a bug in the reader.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/MatmulTable.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlt;
using namespace mlt::rt;

namespace {

constexpr const char *kDevice = "NVIDIA H100 80GB HBM3";
constexpr int64_t kLibrary = 130100;

[[noreturn]] void fail(const std::string &what, const std::string &detail) {
  std::fprintf(stderr, "mlt-fuzz-matmul-table: %s\n%s\n", what.c_str(),
               detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  StatusOr<MatmulTable> table =
      MatmulTable::parse(text, "input", kDevice, kLibrary);
  if (!table) {
    if (table.status().message().find('\n') != std::string::npos)
      fail("an error of more than one line:", table.status().message());
    return 0;
  }
  if (table->device() != kDevice || table->libraryVersion() != kLibrary)
    fail("a table of another device or library was accepted", "");
  for (const auto &[shape, algorithm] : table->entries())
    if (table->find(shape) != &algorithm)
      fail("an entry cannot be found by its shape:", shape);

  const std::string written = table->toJson();
  StatusOr<MatmulTable> reread =
      MatmulTable::parse(written, "written", kDevice, kLibrary);
  if (!reread)
    fail("a table that parsed does not parse once written again:",
         reread.status().message() + "\n" + written);
  if (reread->toJson() != written || reread->size() != table->size())
    fail("a table written again reads as another table", written);
  return 0;
}
