// simt/fiber.h on Boost.Context (the build's choice where Boost.Context is installed).
#include <boost/context/fiber.hpp>

#include "simt/fiber.h"
#include "simt/fiber_asan.h"

namespace kdagraph::simt::detail {
namespace {

// Hands Boost.Context the caller's stack; the caller keeps it.
struct GivenStack {
  char* bottom;
  size_t size;
  boost::context::stack_context allocate() {
    boost::context::stack_context sc;
    sc.size = size;
    sc.sp = bottom + size;
    return sc;
  }
  void deallocate(boost::context::stack_context&) noexcept {}
};

}  // namespace

struct Fiber::Context {
  boost::context::fiber lane;       // the fiber, while it is suspended
  boost::context::fiber scheduler;  // the scheduler, while the fiber runs
  char* bottom = nullptr;
  size_t size = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, across a switch
};

Fiber::Fiber() : context_(std::make_unique<Context>()) {}
Fiber::~Fiber() = default;

const char* Fiber::implementation() { return "Boost.Context"; }

void Fiber::start(char* bottom, size_t size, void (*entry)(void*), void* arg) {
  Context& c = *context_;
  c.bottom = bottom;
  c.size = size;
  c.lane = boost::context::fiber(std::allocator_arg, GivenStack{bottom, size},
                                 [&c, entry, arg](boost::context::fiber&& scheduler) {
                                   c.scheduler = std::move(scheduler);
                                   asan_finish_switch(nullptr, &tl_scheduler_stack.bottom, &tl_scheduler_stack.size);
                                   entry(arg);
                                   asan_start_switch(nullptr, tl_scheduler_stack.bottom, tl_scheduler_stack.size);
                                   return std::move(c.scheduler);
                                 });
}

void Fiber::resume() {
  Context& c = *context_;
  void* fake = nullptr;
  asan_start_switch(&fake, c.bottom, c.size);
  c.lane = std::move(c.lane).resume();
  asan_finish_switch(fake, nullptr, nullptr);
}

void Fiber::suspend() {
  Context& c = *context_;
  asan_start_switch(&c.fake_stack, tl_scheduler_stack.bottom, tl_scheduler_stack.size);
  c.scheduler = std::move(c.scheduler).resume();
  asan_finish_switch(c.fake_stack, &tl_scheduler_stack.bottom, &tl_scheduler_stack.size);
}

}  // namespace kdagraph::simt::detail
