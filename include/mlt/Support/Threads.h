//===- Threads.h - threads that can be started ------------------*- C++ -*-===//
//
// Part of mlt. Under a tight address-space limit (`ulimit -v`, a batch
// system's memory cap) a process may not be able to start the threads a
// thread pool asks for: each reserves a stack. LLVM's thread pool then
// aborts the process ("LLVM ERROR: pthread_create failed"), so callers that
// would start one ask first, and run on one thread where the threads cannot
// be had. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_THREADS_H
#define MLT_SUPPORT_THREADS_H

#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace mlt {

/// How many of `wanted` threads this process can run at once, found by
/// starting them (each waits until all are started or one fails, then
/// ends): `wanted` where nothing stops them.
inline unsigned startableThreads(unsigned wanted) {
  std::mutex mutex;
  std::condition_variable done;
  bool release = false;
  std::vector<std::thread> threads;
  threads.reserve(wanted);
  for (unsigned i = 0; i < wanted; ++i) {
    try {
      threads.emplace_back([&] {
        std::unique_lock<std::mutex> lock(mutex);
        done.wait(lock, [&] { return release; });
      });
    } catch (const std::system_error &) {
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  done.notify_all();
  for (std::thread &thread : threads)
    thread.join();
  return unsigned(threads.size());
}

/// Starts `fn` on a new thread added to `threads`, or, where the process
/// cannot start one, runs it here and now: for work that may run in
/// parallel but need not.
template <typename Fn>
void startOrRun(std::vector<std::thread> &threads, Fn fn) {
  try {
    threads.emplace_back(fn);
  } catch (const std::system_error &) {
    fn();
  }
}

/// Whether a thread pool of the machine's cores (LLVM's and MLIR's
/// default) can start; a machine whose cores are unknown counts as one.
inline bool canStartThreadPool() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores <= 1 || startableThreads(cores) == cores;
}

} // namespace mlt

#endif // MLT_SUPPORT_THREADS_H
