#include "backends/qualcomm/runtime/engine/ThreadPool.h"

#include <algorithm>

namespace qnn_delegate {
namespace engine {

namespace {
thread_local size_t t_thread_limit = 1;
}

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() {
  const size_t hw = std::max<size_t>(1, std::thread::hardware_concurrency());
  workers_.reserve(hw - 1);
  for (size_t i = 1; i < hw; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

size_t ThreadPool::thread_limit() { return t_thread_limit; }

void ThreadPool::set_thread_limit(size_t threads) { t_thread_limit = std::max<size_t>(1, threads); }

void ThreadPool::run_items() {
  for (;;) {
    const size_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_) return;
    fn_(ctx_, begin, std::min(n_, begin + grain_));
  }
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (!open_ || index >= chunks_) continue;
    ++running_;
    lock.unlock();
    run_items();
    lock.lock();
    if (--running_ == 0 && !open_) done_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t n, RangeFn fn, void* ctx) {
  const size_t chunks = std::min({thread_limit(), max_threads(), n});
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (chunks <= 1 || !busy.owns_lock()) {
    if (n) fn(ctx, 0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    chunks_ = chunks;
    grain_ = std::max<size_t>(1, n / (chunks * 8));
    next_.store(0, std::memory_order_relaxed);
    open_ = true;
    ++generation_;
  }
  wake_.notify_all();
  run_items();
  std::unique_lock<std::mutex> lock(mutex_);
  open_ = false;  // workers that wake from now on skip this job
  done_.wait(lock, [&] { return running_ == 0; });
}

}  // namespace engine
}  // namespace qnn_delegate
