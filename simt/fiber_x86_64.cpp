// simt/fiber.h on x86-64 without Boost.Context: a context switch of our own that saves what the
// System V ABI has a callee keep (rbx, rbp, r12-r15, the SSE and x87 control words) on the stack it leaves
// and restores them from the stack it enters; no system call. (glibc's swapcontext, fiber_ucontext.cpp,
// also saves the signal mask with a system call per switch, which made the simt tests eight times
// slower.) Nothing unwinds through the switch: an exception thrown in a lane is caught on the lane's own
// stack (lanes.cpp, run_lane), and the entry marks the bottom of that stack for unwinders.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "simt/fiber.h"
#include "simt/fiber_asan.h"

extern "C" {
// Saves the running context on its stack, stores that stack pointer in *save_sp, and continues the
// context whose stack pointer is load_sp.
void kda_simt_fiber_switch(void** save_sp, void* load_sp);
// Where a new fiber starts: calls kda_simt_fiber_main with the context in r12.
void kda_simt_fiber_entry();
[[noreturn]] void kda_simt_fiber_main(void* context);
}

asm(R"(
        .text
        .p2align 4
        .globl  kda_simt_fiber_switch
        .hidden kda_simt_fiber_switch
        .type   kda_simt_fiber_switch, @function
kda_simt_fiber_switch:
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $8, %rsp
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .size   kda_simt_fiber_switch, .-kda_simt_fiber_switch

        .p2align 4
        .globl  kda_simt_fiber_entry
        .hidden kda_simt_fiber_entry
        .type   kda_simt_fiber_entry, @function
kda_simt_fiber_entry:
        .cfi_startproc
        .cfi_undefined rip
        movq    %r12, %rdi
        call    kda_simt_fiber_main@PLT
        ud2
        .cfi_endproc
        .size   kda_simt_fiber_entry, .-kda_simt_fiber_entry
)");

namespace kdagraph::simt::detail {

struct Fiber::Context {
  void* lane_sp = nullptr;       // the fiber's stack pointer, while it is suspended
  void* scheduler_sp = nullptr;  // the scheduler's, while the fiber runs
  char* bottom = nullptr;
  size_t size = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, across a switch
  void (*entry)(void*) = nullptr;
  void* arg = nullptr;
};

}  // namespace kdagraph::simt::detail

using kdagraph::simt::detail::Fiber;

extern "C" void kda_simt_fiber_main(void* context) {
  using namespace kdagraph::simt::detail;
  auto* c = static_cast<Fiber::Context*>(context);
  asan_finish_switch(nullptr, &tl_scheduler_stack.bottom, &tl_scheduler_stack.size);
  c->entry(c->arg);
  // The fiber is done: its stack may be reused, and it is never resumed.
  asan_start_switch(nullptr, tl_scheduler_stack.bottom, tl_scheduler_stack.size);
  void* unused = nullptr;
  kda_simt_fiber_switch(&unused, c->scheduler_sp);
  std::fprintf(stderr, "kdagraph simt: a finished fiber was resumed\n");
  std::abort();
}

namespace kdagraph::simt::detail {

Fiber::Fiber() : context_(std::make_unique<Context>()) {}
Fiber::~Fiber() = default;

const char* Fiber::implementation() { return "x86-64 context switch"; }

void Fiber::start(char* bottom, size_t size, void (*entry)(void*), void* arg) {
  Context& c = *context_;
  c.bottom = bottom;
  c.size = size;
  c.entry = entry;
  c.arg = arg;
  // The frame kda_simt_fiber_switch restores, at the top of the stack: the control words, six registers
  // (r12 holds the context), the entry as the return address, and a zero return address above it that
  // ends the chain. The entry starts with the stack 16-byte aligned, as its call needs.
  auto* top = reinterpret_cast<uint64_t*>((uintptr_t(bottom) + size) & ~uintptr_t(15));
  uint64_t* sp = top - 10;
  sp[0] = 0x037f'0000'1f80u;  // mxcsr 0x1f80 and x87 control word 0x037f: the ABI's initial values
  sp[1] = 0;                  // r15
  sp[2] = 0;                  // r14
  sp[3] = 0;                  // r13
  sp[4] = uint64_t(uintptr_t(&c));  // r12
  sp[5] = 0;                  // rbx
  sp[6] = 0;                  // rbp
  sp[7] = uint64_t(uintptr_t(&kda_simt_fiber_entry));
  sp[8] = 0;
  sp[9] = 0;
  c.lane_sp = sp;
}

void Fiber::resume() {
  Context& c = *context_;
  void* fake = nullptr;
  asan_start_switch(&fake, c.bottom, c.size);
  kda_simt_fiber_switch(&c.scheduler_sp, c.lane_sp);
  asan_finish_switch(fake, nullptr, nullptr);
}

void Fiber::suspend() {
  Context& c = *context_;
  asan_start_switch(&c.fake_stack, tl_scheduler_stack.bottom, tl_scheduler_stack.size);
  kda_simt_fiber_switch(&c.lane_sp, c.scheduler_sp);
  asan_finish_switch(c.fake_stack, &tl_scheduler_stack.bottom, &tl_scheduler_stack.size);
}

}  // namespace kdagraph::simt::detail
