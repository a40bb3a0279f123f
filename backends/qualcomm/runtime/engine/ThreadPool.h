// A small fixed thread pool for the heavy float kernels. Workers are created
// once (first use, at init time); parallel_for neither allocates nor creates
// threads. The number of threads a call may use is a per-thread limit set by
// the caller (ScopedThreadLimit), from the HTP performance mode.
#pragma once

#include <atomic>
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

  // Runs fn over [0, n) on up to thread_limit() threads, the caller included: the threads
  // claim contiguous ranges of items from a shared counter until none is left, so a thread
  // the OS has not scheduled yet leaves its share to the others, and the caller waits only
  // for threads that are running a range. Each item is processed exactly once, by one
  // thread. Runs serially when the pool is busy (another execute).
  void parallel_for(size_t n, RangeFn fn, void* ctx);

  // Threads parallel_for may use on the calling thread (default 1).
  static size_t thread_limit();
  static void set_thread_limit(size_t threads);

 private:
  ThreadPool();
  void worker_loop(size_t index);
  void run_items();

  std::vector<std::thread> workers_;
  std::mutex busy_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  size_t generation_ = 0;
  size_t running_ = 0;  // workers inside the current job
  bool open_ = false;   // the current job still takes workers
  bool stop_ = false;
  // The current job (written under mutex_ before it opens).
  RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  size_t n_ = 0;
  size_t chunks_ = 0;  // threads it may use
  size_t grain_ = 1;   // items per claim
  std::atomic<size_t> next_{0};
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

}  // namespace engine
}  // namespace qnn_delegate
