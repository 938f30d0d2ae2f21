//===- Checksum.h - CRC-32 and CRC-32C of files -----------------*- C++ -*-===//
//
// Part of mlt. Two CRCs, each header-only (slicing by 8, about 1.5 GB/s),
// plain C++:
// - crc32: the CRC-32 of zlib, PNG and Python's `zlib.crc32` (reflected
//   polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF; the check value
//   of "123456789" is 0xCBF43926), which plan files carry over their content
//   (Plan.h). A CRC rather than a hash: it detects every error burst of up
//   to 32 bits for certain (a flipped byte, a flipped bit, a few bytes
//   overwritten), and any other damage but with probability 2^-32; it is an
//   integrity check, not a signature (anyone can recompute it). Scripts and
//   tests that edit a plan recompute it with Python's standard library
//   alone.
// - crc32c: Castagnoli's (reflected polynomial 0x82F63B78, the same XORs;
//   "123456789" gives 0xE3069283), which TFRecord files (TensorBoard's event
//   files, EventFile.h) frame their records with. (Debian packages no
//   CRC-32C library for C++: Google's crc32c is not in it, and its abseil
//   predates absl/crc.)
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_CHECKSUM_H
#define MLT_SUPPORT_CHECKSUM_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlt {

namespace detail {
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;
/// Table t[k][b] of the reflected polynomial `poly`: the CRC of byte b
/// followed by k zero bytes.
constexpr CrcTables makeCrcTables(uint32_t poly) {
  CrcTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ (poly & (0u - (crc & 1u)));
    t[0][b] = crc;
  }
  for (size_t k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b)
      t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}
inline constexpr CrcTables kCrc32Tables = makeCrcTables(0xEDB88320u);
inline constexpr CrcTables kCrc32cTables = makeCrcTables(0x82F63B78u);

/// The CRC of `size` bytes at `data` by the tables `t`, continuing from
/// `crc`.
inline uint32_t crcOf(const CrcTables &t, const void *data, size_t size,
                      uint32_t crc) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "the slicing below reads little-endian words");
  const auto *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^
          t[4][lo >> 24] ^ t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^
          t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++p)
    crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xFF];
  return ~crc;
}
} // namespace detail

/// The CRC-32 of `size` bytes at `data`, continuing from `crc` (the CRC of
/// the bytes before them; 0 to start).
inline uint32_t crc32(const void *data, size_t size, uint32_t crc = 0) {
  return detail::crcOf(detail::kCrc32Tables, data, size, crc);
}

/// The CRC-32C (Castagnoli) of `size` bytes at `data`, continuing from
/// `crc`.
inline uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0) {
  return detail::crcOf(detail::kCrc32cTables, data, size, crc);
}

} // namespace mlt

#endif // MLT_SUPPORT_CHECKSUM_H
