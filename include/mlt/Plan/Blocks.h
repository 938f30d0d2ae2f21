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

#ifndef MLT_PLAN_BLOCKS_H
#define MLT_PLAN_BLOCKS_H

#include <cstddef>
#include <cstdint>
#include <utility>
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

/// A whole f32 tensor assembled from pieces that each hold a block of it,
/// or a range of a block (its row-major elements [begin, begin + count)):
/// the ranks' blocks of a sharded parameter, a partitioned optimizer's
/// slices, a checkpoint's shards. Ranges are gathered in a block of their
/// own, inserted by finish(). Elements no piece holds stay zero.
class BlockAssembly {
public:
  explicit BlockAssembly(const std::vector<int64_t> &shape);

  /// Places a block (`values`: the block's elements).
  void placeBlock(const BlockLayout &layout, const float *values);
  /// Places elements [begin, begin + count) of the block `layout`.
  void placeRange(const BlockLayout &layout, int64_t begin, int64_t count,
                  const float *values);
  /// The whole tensor.
  std::vector<float> finish();

private:
  std::vector<float> whole_;
  /// The blocks being filled by ranges, by offset, with their layouts.
  std::vector<std::pair<BlockLayout, std::vector<float>>> partial_;
};

} // namespace mlt::rt

#endif // MLT_PLAN_BLOCKS_H
