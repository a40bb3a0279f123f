// A small fixed thread pool for the heavy float kernels. Workers are created
// once (first use, at init time); parallel_for neither allocates nor creates
// threads. The number of threads a call may use is a per-thread limit set by
// the caller (ScopedThreadLimit), from the HTP performance mode.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace qnn_delegate {
namespace engine {

// fn(ctx, begin, end) processes items [begin, end).
using RangeFn = void (*)(void* ctx, size_t begin, size_t end);

class ThreadPool {
 public:
  static ThreadPool& instance();
  ~ThreadPool();

  // Threads the pool can use, the caller included (= hardware threads).
  size_t max_threads() const { return workers_.size() + 1; }

  // Splits [0, n) into at most thread_limit() contiguous chunks; the caller
  // runs the first. Runs serially when the pool is busy (another execute).
  void parallel_for(size_t n, RangeFn fn, void* ctx);

  // Threads parallel_for may use on the calling thread (default 1).
  static size_t thread_limit();
  static void set_thread_limit(size_t threads);

 private:
  ThreadPool();
  void worker_loop(size_t index);
  void run_chunk(size_t chunk) const;

  std::vector<std::thread> workers_;
  std::mutex busy_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
  // The current job.
  RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  size_t n_ = 0;
  size_t chunks_ = 0;
};

// Sets the calling thread's limit for its lifetime, restores the old one after.
class ScopedThreadLimit {
 public:
  explicit ScopedThreadLimit(size_t threads) : previous_(ThreadPool::thread_limit()) {
    ThreadPool::set_thread_limit(threads);
  }
  ~ScopedThreadLimit() { ThreadPool::set_thread_limit(previous_); }
  ScopedThreadLimit(const ScopedThreadLimit&) = delete;
  ScopedThreadLimit& operator=(const ScopedThreadLimit&) = delete;

 private:
  size_t previous_;
};

} // namespace engine
} // namespace qnn_delegate
