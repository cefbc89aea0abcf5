// simt/fiber.h on glibc's makecontext and swapcontext: the build's choice where Boost.Context is not
// installed, so the simt tests need no package beyond the C library. Each switch also saves and restores
// the signal mask (a system call), which Boost.Context skips; the tests run slower, not differently.
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "simt/fiber.h"
#include "simt/fiber_asan.h"

namespace kdagraph::simt::detail {

struct Fiber::Context {
  ucontext_t lane;       // the fiber, while it is suspended
  ucontext_t scheduler;  // the scheduler, while the fiber runs
  char* bottom = nullptr;
  size_t size = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, across a switch
  void (*entry)(void*) = nullptr;
  void* arg = nullptr;
};

namespace {

[[noreturn]] void die(const char* call) {
  std::perror(call);
  std::abort();
}

// makecontext passes int arguments only: the context's address travels in two halves.
void trampoline(unsigned high, unsigned low) {
  auto* c = reinterpret_cast<Fiber::Context*>(uintptr_t(high) << 32 | uintptr_t(low));
  asan_finish_switch(nullptr, &tl_scheduler_stack.bottom, &tl_scheduler_stack.size);
  c->entry(c->arg);
  // The fiber is done: its stack may be reused, and it is never resumed.
  asan_start_switch(nullptr, tl_scheduler_stack.bottom, tl_scheduler_stack.size);
  setcontext(&c->scheduler);
  die("setcontext");
}

}  // namespace

Fiber::Fiber() : context_(std::make_unique<Context>()) {}
Fiber::~Fiber() = default;

const char* Fiber::implementation() { return "ucontext"; }

void Fiber::start(char* bottom, size_t size, void (*entry)(void*), void* arg) {
  Context& c = *context_;
  c.bottom = bottom;
  c.size = size;
  c.entry = entry;
  c.arg = arg;
  if (getcontext(&c.lane) != 0) die("getcontext");
  c.lane.uc_stack.ss_sp = bottom;
  c.lane.uc_stack.ss_size = size;
  c.lane.uc_link = nullptr;
  const auto address = uintptr_t(&c);
  makecontext(&c.lane, reinterpret_cast<void (*)()>(trampoline), 2, unsigned(address >> 32), unsigned(address));
}

void Fiber::resume() {
  Context& c = *context_;
  void* fake = nullptr;
  asan_start_switch(&fake, c.bottom, c.size);
  if (swapcontext(&c.scheduler, &c.lane) != 0) die("swapcontext");
  asan_finish_switch(fake, nullptr, nullptr);
}

void Fiber::suspend() {
  Context& c = *context_;
  asan_start_switch(&c.fake_stack, tl_scheduler_stack.bottom, tl_scheduler_stack.size);
  if (swapcontext(&c.lane, &c.scheduler) != 0) die("swapcontext");
  asan_finish_switch(c.fake_stack, &tl_scheduler_stack.bottom, &tl_scheduler_stack.size);
}

}  // namespace kdagraph::simt::detail
