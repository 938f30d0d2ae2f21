//===- ContentHash.h - checksums of large contents -------------*- C++ -*-===//
//
// Part of mlt. The 64-bit XXH3 hash (xxHash 0.8, seed 0) of what a
// checkpoint holds: each shard file whole, its header, each tensor piece,
// and its small files. XXH3 rather than the CRC-32 of plans (Checksum.h)
// because a checkpoint is gigabytes to terabytes: XXH3 hashes at the
// memory's rate (tens of GB/s), a CRC table at about 1.5 GB/s, which on a
// 7B model's 84 GB of f32 state would add a minute to every save and
// resume. Like the CRC it is an integrity check, not a signature. Written
// as 16 lowercase hex digits, the form `xxhsum -H3 FILE` prints, so that a
// user can check a shard by hand.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_CONTENTHASH_H
#define MLT_SUPPORT_CONTENTHASH_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace mlt {

/// The XXH3-64 hash of `size` bytes at `data`.
uint64_t contentHash(const void *data, size_t size);

/// The hash of bytes given in pieces: update() them in order, then
/// digest(), which equals contentHash of their concatenation.
class ContentHasher {
public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(ContentHasher &&) noexcept;
  ContentHasher &operator=(ContentHasher &&) noexcept;

  void update(const void *data, size_t size);
  uint64_t digest() const;

private:
  struct State;
  std::unique_ptr<State> state_;
};

/// `hash` as 16 lowercase hex digits (xxhsum's form).
std::string formatContentHash(uint64_t hash);
/// The hash 16 hex digits spell, or none for anything else.
std::optional<uint64_t> parseContentHash(std::string_view text);

} // namespace mlt

#endif // MLT_SUPPORT_CONTENTHASH_H
