// Byte-counting allocator for everything the engine owns (weights, arena,
// scratch, packed kernels data). 64-byte aligned.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace qnn_delegate {
namespace engine {

constexpr size_t kAlignment = 64;

inline size_t align_up(size_t n, size_t a = kAlignment) { return (n + a - 1) / a * a; }

class TrackingAllocator {
 public:
  // Returns nullptr on failure. Not initialised (pages are touched on first use).
  void* allocate(size_t bytes);
  void release(void* ptr, size_t bytes);

  size_t bytes_in_use() const { return in_use_; }
  size_t peak_bytes() const { return peak_; }
  size_t total_allocated() const { return total_; }

  // Process-wide bytes in use by all engine allocators.
  static size_t process_bytes_in_use();

 private:
  size_t in_use_ = 0;
  size_t peak_ = 0;
  size_t total_ = 0;
};

// RAII buffer owned by a TrackingAllocator.
class Buffer {
 public:
  Buffer() = default;
  Buffer(TrackingAllocator* alloc, size_t bytes)
      : alloc_(alloc), size_(bytes), data_(bytes ? alloc->allocate(bytes) : nullptr) {}
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = o.alloc_;
      size_ = o.size_;
      data_ = o.data_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  void reset() {
    if (data_ && alloc_) alloc_->release(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  // True when the requested bytes were obtained (an empty buffer is valid).
  bool valid() const { return size_ == 0 || data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  TrackingAllocator* alloc_ = nullptr;
  size_t size_ = 0;
  void* data_ = nullptr;
};

}  // namespace engine
}  // namespace qnn_delegate
