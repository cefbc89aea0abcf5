// Shared memory of the SIMT executor: every shared object (kdagraph::shared_object) has its own offset,
// reserved at its first use, and a block's shared memory is poisoned (0xff bytes) at its start.
#pragma once

#include <cstddef>

namespace kdagraph::simt::detail {

// True when [p, p + bytes) lies in shared memory.
bool in_shared(const void* p, size_t bytes);
// Poisons every reserved byte: a new block starts.
void poison_shared();

}  // namespace kdagraph::simt::detail
