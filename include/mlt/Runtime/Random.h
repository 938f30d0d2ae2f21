//===- Random.h - portable seed derivation ----------------------*- C++ -*-===//
//
// Part of mlt. The runtime's random streams (data shuffling, parameter init)
// must give the same numbers on every platform and standard library, so they
// derive their generators' seeds with this one mixing function instead of
// std::hash or std::seed_seq.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_RANDOM_H
#define MLT_RUNTIME_RANDOM_H

#include <cstdint>

namespace mlt::rt {

/// SplitMix64's finalizer: a bijective mix of 64 bits, so that related seeds
/// (seed, seed + 1, seed ^ epoch) give unrelated generator states.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

} // namespace mlt::rt

#endif // MLT_RUNTIME_RANDOM_H
