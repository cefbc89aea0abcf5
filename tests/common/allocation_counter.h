// Counts the heap allocations the calling thread makes while a scope is open: the test programs that
// link tests/common/allocation_counter.cpp replace the global operator new with a counting one. What a
// thread allocates inside an OpenMP parallel region is not counted: there the CPU backend's kernels do
// a device's work (verify_cpu's per-thread working rows), not the host path of a launch.
#pragma once

#include <cstdint>

namespace kdagraph::test {

class AllocationCount {
 public:
  AllocationCount();
  ~AllocationCount();
  AllocationCount(const AllocationCount&) = delete;
  AllocationCount& operator=(const AllocationCount&) = delete;
  // Allocations this thread made since construction.
  int64_t allocations() const;

 private:
  int64_t start_;
};

}  // namespace kdagraph::test
