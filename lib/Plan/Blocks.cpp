//===- Blocks.cpp - blocks of row-major tensors ---------------------------===//
//
// Part of mlt. A block is copied as runs along the innermost dimensions that
// it spans completely: the run length is the product of the trailing
// dimensions where the block equals the tensor, times the first dimension
// (from the end) where it does not; an odometer walks the dimensions before
// it.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/Blocks.h"

#include <algorithm>
#include <cstring>
#include <iterator>

using namespace mlt::rt;

bool BlockLayout::isWhole() const {
  for (size_t d = 0; d < shape.size(); ++d)
    if (offset[d] != 0 || shape[d] != fullShape[d])
      return false;
  return true;
}

namespace {

/// Calls `copy(fullElement, blockElement, elements)` for every contiguous
/// run of the block, in row-major order.
template <typename Copy> void forEachRun(const BlockLayout &layout, Copy copy) {
  const size_t rank = layout.shape.size();
  for (int64_t dim : layout.shape)
    if (dim == 0)
      return;
  if (rank == 0) {
    copy(0, 0, 1);
    return;
  }
  // The run: trailing dimensions the block spans whole, plus one more.
  size_t split = rank - 1; // dimensions [split, rank) form one run
  int64_t run = layout.shape[rank - 1];
  while (split > 0 && layout.shape[split] == layout.fullShape[split] &&
         layout.offset[split] == 0) {
    --split;
    run *= layout.shape[split];
  }
  // Strides of the tensor in elements.
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d)
    stride[d - 1] = stride[d] * layout.fullShape[d];

  std::vector<int64_t> index(split, 0); // over dimensions [0, split)
  int64_t blockElement = 0;
  while (true) {
    int64_t fullElement = 0;
    for (size_t d = 0; d < rank; ++d)
      fullElement +=
          (layout.offset[d] + (d < split ? index[d] : 0)) * stride[d];
    copy(fullElement, blockElement, run);
    blockElement += run;
    size_t d = split;
    while (d > 0) {
      --d;
      if (++index[d] < layout.shape[d])
        break;
      index[d] = 0;
      if (d == 0)
        return;
    }
    if (split == 0)
      return;
  }
}

} // namespace

void mlt::rt::extractBlock(const void *full, const BlockLayout &layout,
                           size_t elementBytes, void *block) {
  const auto *from = static_cast<const uint8_t *>(full);
  auto *to = static_cast<uint8_t *>(block);
  forEachRun(
      layout, [&](int64_t fullElement, int64_t blockElement, int64_t elements) {
        std::memcpy(to + blockElement * elementBytes,
                    from + fullElement * elementBytes, elements * elementBytes);
      });
}

void mlt::rt::insertBlock(void *full, const BlockLayout &layout,
                          size_t elementBytes, const void *block) {
  auto *to = static_cast<uint8_t *>(full);
  const auto *from = static_cast<const uint8_t *>(block);
  forEachRun(layout, [&](int64_t fullElement, int64_t blockElement,
                         int64_t elements) {
    std::memcpy(to + fullElement * elementBytes,
                from + blockElement * elementBytes, elements * elementBytes);
  });
}

namespace {
int64_t elementsOfShape(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}
} // namespace

mlt::rt::BlockAssembly::BlockAssembly(const std::vector<int64_t> &shape)
    : whole_(size_t(elementsOfShape(shape)), 0.0f) {}

void mlt::rt::BlockAssembly::placeBlock(const BlockLayout &layout,
                                        const float *values) {
  insertBlock(whole_.data(), layout, sizeof(float), values);
}

void mlt::rt::BlockAssembly::placeRange(const BlockLayout &layout,
                                        int64_t begin, int64_t count,
                                        const float *values) {
  if (layout.isWhole()) {
    std::copy(values, values + count, whole_.begin() + begin);
    return;
  }
  auto block = std::find_if(partial_.begin(), partial_.end(),
                            [&](const auto &entry) {
                              return entry.first.offset == layout.offset;
                            });
  if (block == partial_.end()) {
    partial_.emplace_back(
        layout, std::vector<float>(size_t(elementsOfShape(layout.shape)), 0.0f));
    block = std::prev(partial_.end());
  }
  std::copy(values, values + count, block->second.begin() + begin);
}

std::vector<float> mlt::rt::BlockAssembly::finish() {
  for (const auto &[layout, block] : partial_)
    insertBlock(whole_, layout, block);
  partial_.clear();
  return std::move(whole_);
}
