//===- QuantizationReuse.h - FP8 quantizations shared -----------*- C++ -*-===//
//
// Part of mlt. The reuse rule of mlt-fp8-products (Passes.td): in a
// program's list of launches, a product asks for quantized copies of its
// operands (a source buffer in one layout and format, and the source's
// largest magnitude), and each request either reuses the copy an earlier
// request made or makes a new one just before its launch. A layer's
// normalized input so feeds its q, k and v products with one quantization,
// and its transpose their three weight gradients with another. Plain C++:
// launches are items with the buffers they write and what they ask for.
//
// Invariants of shareQuantizations' result (checkSharing tests them against
// the naive reference, which looks back from every request in O(n^2)):
// - a request reuses the first request of its (source, form) that came
//   before it, unless a launch between them (the earlier request's own
//   launch included, after its products read the copy) writes the source or
//   is a barrier; it then makes a new copy;
// - a request that makes a new copy is its own origin.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_QUANTIZATIONREUSE_H
#define MLT_ANALYSIS_QUANTIZATIONREUSE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlt::analysis {

/// A quantized copy a launch asks for: its source buffer (an id; a buffer
/// that overlaps another shares its id) and its form (any value: the pass
/// numbers a layout and format, or the amax).
struct QuantizeRequest {
  int64_t source = 0;
  uint64_t form = 0;
};

/// One launch: the buffers it writes, whether no copy may be reused across
/// it (a launch ordered by more than program order: streams, tokens), and
/// the copies it asks for, read before it writes anything.
struct QuantizeItem {
  std::vector<int64_t> writes;
  bool barrier = false;
  std::vector<QuantizeRequest> requests;
};

/// (item, request) positions.
using RequestRef = std::pair<size_t, size_t>;

/// For every item and request, the request whose copy it reads (itself when
/// it makes one). O(total requests + writes) map operations.
std::vector<std::vector<RequestRef>>
shareQuantizations(const std::vector<QuantizeItem> &items);

/// Whether `origins` keeps the invariants above for `items` (empty), or the
/// first it breaks: the naive reference.
std::string checkSharing(const std::vector<QuantizeItem> &items,
                         const std::vector<std::vector<RequestRef>> &origins);

} // namespace mlt::analysis

#endif // MLT_ANALYSIS_QUANTIZATIONREUSE_H
