// A fiber lane of the SIMT executor: a context with a stack of its own, switched to and from the
// scheduler on the launching thread. One interface, two implementations chosen at configure time
// (simt/CMakeLists.txt): Boost.Context where it is installed (fiber_boost.cpp), else glibc's
// makecontext and swapcontext (fiber_ucontext.cpp), which need no package. Both tell AddressSanitizer
// about every switch, so it follows the stacks.
#pragma once

#include <cstddef>
#include <memory>

namespace kdagraph::simt::detail {

class Fiber {
 public:
  Fiber();
  ~Fiber();
  // Owns a suspended context that points into its own storage.
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // The fiber will run entry(arg) on the stack [bottom, bottom + size) from its next resume(). The
  // stack stays the caller's; it may be reused once entry has returned.
  void start(char* bottom, size_t size, void (*entry)(void*), void* arg);
  // Scheduler side: runs the fiber until it suspends or its entry returns.
  void resume();
  // Fiber side: back to the scheduler that resumed it.
  void suspend();

  // Which implementation this build has, for configure and test output.
  static const char* implementation();

  struct Context;  // the implementation's

 private:
  std::unique_ptr<Context> context_;
};

}  // namespace kdagraph::simt::detail
