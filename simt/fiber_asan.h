// AddressSanitizer must know which stack is current across a fiber switch (fiber_boost.cpp and
// fiber_ucontext.cpp both announce every switch through these). Without ASan they do nothing.
#pragma once

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KDA_SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(KDAGRAPH_SIMT_ASAN_FIBERS)
#define KDA_SIMT_ASAN 1
#endif
#if defined(KDA_SIMT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace kdagraph::simt::detail {

inline void asan_start_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(KDA_SIMT_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

inline void asan_finish_switch(void* fake_stack, const void** bottom_old, size_t* size_old) {
#if defined(KDA_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
  (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

// The launching thread's stack, learnt at the first switch into a fiber: where a fiber switches back to.
struct SchedulerStack {
  const void* bottom = nullptr;
  size_t size = 0;
};
inline thread_local SchedulerStack tl_scheduler_stack;

}  // namespace kdagraph::simt::detail
