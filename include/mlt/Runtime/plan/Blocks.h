//===- Blocks.h - blocks of row-major tensors -------------------*- C++ -*-===//
//
// Part of mlt. A sharded plan gives each rank a block of a tensor (a
// parameter, or the micro-batch's tokens): the box [offset, offset + shape)
// of a row-major tensor of shape fullShape (BufferDesc::fullShape and
// sliceOffset). These copy such a box between the whole tensor and a
// contiguous buffer of the block's shape, one memcpy per contiguous run, so
// that the host can hand each rank its block and assemble whole tensors from
// the ranks' blocks. The caller guarantees that the block lies inside the
// tensor (the plan verifier checks it for plan buffers).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_BLOCKS_H
#define MLT_RUNTIME_BLOCKS_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlt::rt {

/// Where one block lies in its tensor; all three have the tensor's rank.
struct BlockLayout {
  std::vector<int64_t> fullShape;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;

  /// Whether the block is the whole tensor.
  bool isWhole() const;
};

/// Copies the block out of `full` (the whole tensor) into `block`
/// (contiguous, of the block's shape); elements are `elementBytes` each.
void extractBlock(const void *full, const BlockLayout &layout,
                  size_t elementBytes, void *block);

/// Copies `block` (contiguous, of the block's shape) into its place in
/// `full`.
void insertBlock(void *full, const BlockLayout &layout, size_t elementBytes,
                 const void *block);

/// Typed forms of the two.
template <typename T>
std::vector<T> extractBlock(const std::vector<T> &full,
                            const BlockLayout &layout) {
  int64_t count = 1;
  for (int64_t dim : layout.shape)
    count *= dim;
  std::vector<T> block(static_cast<size_t>(count));
  extractBlock(full.data(), layout, sizeof(T), block.data());
  return block;
}

template <typename T>
void insertBlock(std::vector<T> &full, const BlockLayout &layout,
                 const std::vector<T> &block) {
  insertBlock(full.data(), layout, sizeof(T), block.data());
}

} // namespace mlt::rt

#endif // MLT_RUNTIME_BLOCKS_H
