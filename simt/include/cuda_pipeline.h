// Stands in for the toolkit's cuda_pipeline.h in code compiled for the SIMT executor: the copies are
// queued per thread and performed by the __pipeline_wait_prior that covers their batch, so a missing or
// short wait reads the poisoned shared memory instead of the data.
#pragma once

#include <cstddef>

#include "simt/device.h"

inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t size_and_align,
                                    size_t zfill = 0, const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  kdagraph::simt::pipeline_memcpy_async(dst_shared, src_global, size_and_align, zfill, file, line);
}

inline void __pipeline_commit() { kdagraph::simt::pipeline_commit(); }

inline void __pipeline_wait_prior(size_t prior, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kdagraph::simt::pipeline_wait_prior(prior, file, line);
}
