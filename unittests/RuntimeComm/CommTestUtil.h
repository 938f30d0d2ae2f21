//===- CommTestUtil.h - helpers of the in-process comm tests ----*- C++ -*-===//
//
// Part of mlt. What the tests of the in-process collectives
// (InProcessCommTest.cpp) and exchanges (InProcessExchangeTest.cpp) share:
// worlds with a timeout, one thread per rank, each rank's message, and
// random elements of every type.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMECOMM_COMMTESTUTIL_H
#define MLT_UNITTESTS_RUNTIMECOMM_COMMTESTUTIL_H

#include "mlt/Runtime/comm/InProcessComm.h"

#include "mlt/Support/Bf16.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace mlt::rt::testing {

using Bytes = std::vector<uint8_t>;

inline Mesh parseOrDie(const std::string &spec) {
  StatusOr<Mesh> mesh = Mesh::parse(spec);
  EXPECT_TRUE(mesh.isOk()) << mesh.status().message();
  return *mesh;
}

/// A world for the tests: with a timeout far above any test's needs, so that
/// a bug that would hang fails the test instead.
inline std::unique_ptr<InProcessWorld> makeWorld(const std::string &spec) {
  InProcessWorld::Options options;
  options.timeout = std::chrono::seconds(60);
  return std::make_unique<InProcessWorld>(parseOrDie(spec), options);
}

/// Runs `body(rank, communicator)` on one thread per rank of `world` and
/// joins them.
template <typename Body> void runRanks(InProcessWorld &world, Body body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world.mesh().worldSize(); ++rank)
    threads.emplace_back([&world, &body, rank] {
      StatusOr<Communicator *> comm = world.communicator(rank);
      if (comm.isOk())
        body(rank, **comm);
    });
  for (std::thread &thread : threads)
    thread.join();
}

/// Runs `body` on every rank of `comms` and returns each rank's message
/// ("" for success).
template <typename Body>
std::vector<std::string> messagesOf(InProcessWorld &comms, Body body) {
  std::vector<std::string> messages(comms.mesh().worldSize());
  runRanks(comms, [&](int rank, Communicator &comm) {
    Status status = body(rank, comm);
    if (!status)
      messages[rank] = status.message();
  });
  return messages;
}

inline size_t bytesOf(ElementType type) {
  switch (type) {
  case ElementType::F64:
    return 8;
  case ElementType::BF16:
    return 2;
  default:
    return 4;
  }
}

/// `count` random elements: floats of random sign and magnitudes spread over
/// 2^-12 .. 2^12 (never zero), or any i32.
inline Bytes randomElements(ElementType type, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.5, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::uniform_int_distribution<int> coin(0, 1);
  Bytes bytes(count * bytesOf(type));
  for (size_t i = 0; i < count; ++i) {
    double value = std::ldexp(unit(rng), exponent(rng)) * (coin(rng) ? 1 : -1);
    switch (type) {
    case ElementType::F32: {
      float v = float(value);
      std::memcpy(&bytes[i * 4], &v, 4);
      break;
    }
    case ElementType::F64:
      std::memcpy(&bytes[i * 8], &value, 8);
      break;
    case ElementType::BF16: {
      uint16_t v = mlt::floatToBF16(float(value));
      std::memcpy(&bytes[i * 2], &v, 2);
      break;
    }
    default: {
      int32_t v = int32_t(rng());
      std::memcpy(&bytes[i * 4], &v, 4);
      break;
    }
    }
  }
  return bytes;
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMECOMM_COMMTESTUTIL_H
