// The counting global operator new of tests/common/allocation_counter.h.
#include "tests/common/allocation_counter.h"

#include <omp.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
thread_local int64_t t_allocations = 0;
thread_local int t_open = 0;

void* allocate(std::size_t bytes, std::size_t alignment) {
  if (t_open > 0 && !omp_in_parallel()) ++t_allocations;
  void* p = alignment <= alignof(std::max_align_t) ? std::malloc(bytes == 0 ? 1 : bytes)
                                                   : std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t bytes) { return allocate(bytes, alignof(std::max_align_t)); }
void* operator new(std::size_t bytes, std::align_val_t a) { return allocate(bytes, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace kdagraph::test {

AllocationCount::AllocationCount() : start_(t_allocations) { ++t_open; }
AllocationCount::~AllocationCount() { --t_open; }
int64_t AllocationCount::allocations() const { return t_allocations - start_; }

}  // namespace kdagraph::test
