//===- FormatBytes.h - sizes in messages -------------------------*- C++ -*-===//
//
// Part of mlt. One way to write a size for a person: "512 bytes",
// "3.25 MiB", "13.20 GiB", from 64-bit byte counts (never an int that
// wraps at 2^31). Header-only.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_FORMATBYTES_H
#define MLT_SUPPORT_FORMATBYTES_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace mlt {

/// `bytes` in the largest binary unit it reaches (bytes, KiB, MiB, GiB,
/// TiB), two decimals above bytes.
inline std::string formatBytes(uint64_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  char text[48];
  if (bytes < 1024) {
    std::snprintf(text, sizeof(text), "%llu bytes",
                  static_cast<unsigned long long>(bytes));
    return text;
  }
  double value = double(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  return text;
}

} // namespace mlt

#endif // MLT_SUPPORT_FORMATBYTES_H
