// The counting global operator new of tests/common/allocation_counter.h.
#include "tests/common/allocation_counter.h"

#include <omp.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
thread_local int64_t t_allocations = 0;
thread_local int t_open = 0;
thread_local bool t_asking = false;

void* allocate(std::size_t bytes, std::size_t alignment) {
  // omp_in_parallel() may allocate itself (libomp loads its OMPT tools, libarcher under clang, at its
  // first call): such an allocation is not counted, and never asks again, which deadlocked libomp.
  if (t_open > 0 && !t_asking) {
    t_asking = true;
    if (!omp_in_parallel()) ++t_allocations;
    t_asking = false;
  }
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

AllocationCount::AllocationCount() : start_(t_allocations) {
  (void)omp_in_parallel();  // the OpenMP runtime starts (and allocates) before counting begins
  ++t_open;
}
AllocationCount::~AllocationCount() { --t_open; }
int64_t AllocationCount::allocations() const { return t_allocations - start_; }

}  // namespace kdagraph::test
