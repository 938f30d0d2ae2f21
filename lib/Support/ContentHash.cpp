//===- ContentHash.cpp - checksums of large contents ----------------------===//
//
// Part of mlt. ContentHash.h over libxxhash's XXH3, compiled in (xxHash's
// XXH_INLINE_ALL): nothing to load at run time on the GPU machines.
//
//===----------------------------------------------------------------------===//

#include "mlt/Support/ContentHash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

using namespace mlt;

uint64_t mlt::contentHash(const void *data, size_t size) {
  return XXH3_64bits(data, size);
}

struct ContentHasher::State {
  XXH3_state_t xxh;
};

ContentHasher::ContentHasher() : state_(std::make_unique<State>()) {
  XXH3_64bits_reset(&state_->xxh);
}
ContentHasher::~ContentHasher() = default;
ContentHasher::ContentHasher(ContentHasher &&) noexcept = default;
ContentHasher &ContentHasher::operator=(ContentHasher &&) noexcept = default;

void ContentHasher::update(const void *data, size_t size) {
  XXH3_64bits_update(&state_->xxh, data, size);
}

uint64_t ContentHasher::digest() const {
  return XXH3_64bits_digest(&state_->xxh);
}

std::string mlt::formatContentHash(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(hash));
  return text;
}

std::optional<uint64_t> mlt::parseContentHash(std::string_view text) {
  if (text.size() != 16)
    return std::nullopt;
  uint64_t hash = 0;
  for (char c : text) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else
      return std::nullopt;
    hash = hash << 4 | uint64_t(digit);
  }
  return hash;
}
