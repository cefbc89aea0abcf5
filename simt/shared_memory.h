// Shared memory of the SIMT executor: every shared object (kdagraph::shared_object) has its own offset,
// reserved at its first use for the whole process, in every block's own arena; a block's arena is
// poisoned (0xff bytes) at its start. Dynamic shared memory (kdagraph::dynamic_shared) is a separate
// allocation of exactly the launch's bytes, so AddressSanitizer sees an access past them. Blocks held
// at grid_dependency_wait keep theirs while others run.
#pragma once

#include <cstddef>
#include <memory>

namespace kdagraph::simt::detail {

class SharedArena {
 public:
  SharedArena();
  ~SharedArena();
  // Owns a mapping that must be unmapped exactly once.
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  unsigned char* data() const { return data_; }
  unsigned char* dynamic_data() const { return dynamic_.get(); }
  // A block starts with `dynamic_bytes` of dynamic shared memory: every reserved byte and every dynamic
  // one poisoned.
  void start(size_t dynamic_bytes);
  // True when [p, p + bytes) lies in the reserved part or the dynamic one.
  bool contains(const void* p, size_t bytes) const;

 private:
  unsigned char* data_;
  std::unique_ptr<unsigned char[]> dynamic_;
  size_t dynamic_bytes_ = 0;
};

// True when [p, p + bytes) lies in the calling lane's shared memory.
bool in_shared(const void* p, size_t bytes);

}  // namespace kdagraph::simt::detail
