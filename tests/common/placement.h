// A case's host vectors placed in a backend's memory for an operation to read and write
// (tests/common/runner.h [TAG_RUNNERS]).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "kdagraph/types.hpp"
#include "kernels/memory.h"

namespace kdagraph::test {

// A case's host vectors where the runner's operations read and write them: the vectors themselves where
// the runner works in host memory (the CPU backend, the SIMT executor), device copies on the GPU, which
// fetch() copies back into the vectors they were made from. Pointers stay valid while this lives.
class Placement {
 public:
  explicit Placement(Backend memory) : memory_(memory) {}
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;

  // `host` for the operation to write (fetched back) or only to read.
  template <class T>
  T* out(std::vector<T>& host) {
    return static_cast<T*>(place(host.data(), host.size() * sizeof(T), true));
  }
  template <class T>
  const T* in(const std::vector<T>& host) {
    return static_cast<const T*>(place(const_cast<T*>(host.data()), host.size() * sizeof(T), false));
  }
  // Copies every buffer placed with out() back into its host vector; nothing to do in host memory.
  void fetch() {
    if (memory_ == Backend::cpu) return;
    detail::wait_for_device(memory_);
    for (const Copy& c : copies_)
      if (c.writable) detail::copy_to_host(memory_, c.host, c.buffer.data(), c.buffer.bytes());
  }
  Backend memory() const { return memory_; }

 private:
  struct Copy {
    void* host;
    detail::Buffer buffer;
    bool writable;
  };
  void* place(void* host, size_t bytes, bool writable) {
    if (memory_ == Backend::cpu || host == nullptr) return host;
    detail::Buffer b(memory_, bytes == 0 ? 16 : bytes);
    if (bytes > 0) b.upload(host, bytes);
    void* at = b.data();
    copies_.push_back(Copy{host, std::move(b), writable});
    return at;
  }
  Backend memory_;
  std::vector<Copy> copies_;
};

}  // namespace kdagraph::test
