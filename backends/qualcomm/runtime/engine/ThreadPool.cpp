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

void ThreadPool::run_chunk(size_t chunk) const {
  const size_t begin = n_ * chunk / chunks_;
  const size_t end = n_ * (chunk + 1) / chunks_;
  if (begin < end) fn_(ctx_, begin, end);
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= chunks_) continue;
    lock.unlock();
    run_chunk(index);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
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
    pending_ = chunks - 1;
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
}

} // namespace engine
} // namespace qnn_delegate
