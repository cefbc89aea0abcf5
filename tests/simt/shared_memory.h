// Shared memory of the SIMT executor: every shared object (kdagraph::shared_object) has its own offset,
// reserved at its first use for the whole process, in every block's own arena; a block's arena is
// poisoned (0xff bytes) at its start. Blocks held at grid_dependency_wait keep theirs while others run.
#pragma once

#include <cstddef>

namespace kdagraph::simt::detail {

class SharedArena {
 public:
  SharedArena();
  ~SharedArena();
  // Owns a mapping that must be unmapped exactly once.
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  unsigned char* data() const { return data_; }
  // Poisons every reserved byte: a block starts.
  void poison();
  // True when [p, p + bytes) lies in the reserved part.
  bool contains(const void* p, size_t bytes) const;

 private:
  unsigned char* data_;
};

// True when [p, p + bytes) lies in the calling lane's shared memory.
bool in_shared(const void* p, size_t bytes);

}  // namespace kdagraph::simt::detail
