//===- Fiber.cpp - stackful coroutines for the thread engine --------------===//
//
// The context switch, the stacks and their pool. Under AddressSanitizer
// every switch is announced (__sanitizer_start_switch_fiber), so ASan
// follows the fibers' stacks instead of reporting them as overflows.
//
//===----------------------------------------------------------------------===//
#include "VirtualGpu/Fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define MOE_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOE_FIBER_ASAN 1
#endif
#endif
#ifdef MOE_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace moe::rt::virtual_gpu {

namespace {

size_t pageBytes() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

/// Stacks are costly to map (and to fault in), so each OS thread keeps the
/// ones its fibers gave back. The pool is the thread's: a fiber runs, ends
/// and is destroyed on the thread that resumed it.
/// Whether this thread's pool exists: fibers may outlive it at thread exit
/// (thread-local objects of the engine destroyed after it), and then give
/// their stacks straight back to the system. Trivially destructible, so
/// readable at any point of the thread's exit.
thread_local bool stackPoolAlive = false;

void unmapStack(unsigned char *stack) {
  munmap(stack - pageBytes(), Fiber::kStackBytes + pageBytes());
}

struct StackPool {
  std::vector<unsigned char *> free;
  StackPool() { stackPoolAlive = true; }
  ~StackPool() {
    stackPoolAlive = false;
    for (unsigned char *stack : free)
      unmapStack(stack);
  }
  unsigned char *take() {
    if (!free.empty()) {
      unsigned char *stack = free.back();
      free.pop_back();
      return stack;
    }
    size_t total = Fiber::kStackBytes + pageBytes();
    void *mapping = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) {
      std::fprintf(stderr, "virtual gpu: cannot map a %zu-byte fiber stack\n",
                   total);
      std::abort();
    }
    // The page below the stack is a guard: an overflow faults there.
    mprotect(mapping, pageBytes(), PROT_NONE);
    return static_cast<unsigned char *>(mapping) + pageBytes();
  }
  void give(unsigned char *stack) { free.push_back(stack); }
};

StackPool &stackPool() {
  static thread_local StackPool pool;
  return pool;
}

} // namespace

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, loads `load` as the stack pointer and restores the same
// from it (System V x86-64 ABI). The x87 control word and MXCSR are not
// switched: kernels never change the floating-point environment, so every
// fiber runs in its OS thread's (and loading them costs more than the rest
// of the switch).
extern "C" void moe_vgpu_switch_context(void **save, void *load);
// Where a new fiber's first switch returns to: calls r13(r12).
extern "C" void moe_vgpu_fiber_start();
asm(R"(
  .text
  .p2align 4
  .globl moe_vgpu_switch_context
  .hidden moe_vgpu_switch_context
  .type moe_vgpu_switch_context,@function
moe_vgpu_switch_context:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size moe_vgpu_switch_context,.-moe_vgpu_switch_context

  .p2align 4
  .globl moe_vgpu_fiber_start
  .hidden moe_vgpu_fiber_start
  .type moe_vgpu_fiber_start,@function
moe_vgpu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size moe_vgpu_fiber_start,.-moe_vgpu_fiber_start
)");
#endif

struct Fiber::Context {
  Entry entry;
  void *argument;
  unsigned char *stack = nullptr;
  bool started = false, finished = false;
#if defined(__x86_64__)
  void *fiberStackPointer = nullptr;
  void *resumerStackPointer = nullptr;
#else
  ucontext_t fiberContext, resumerContext;
#endif
#ifdef MOE_FIBER_ASAN
  void *fakeStack = nullptr;
  const void *resumerStackBottom = nullptr;
  size_t resumerStackBytes = 0;
  bool resumedDirectly = false;
#endif

  /// The fiber's first frame: runs the entry, which ends in finish().
  static void main(Context *context) {
#ifdef MOE_FIBER_ASAN
    // Started by resume() (from the resumer's stack, recorded here) or by
    // another fiber's transferTo() (which copied its resumer's bounds in).
    const void *bottom;
    size_t bytes;
    __sanitizer_finish_switch_fiber(nullptr, &bottom, &bytes);
    if (context->resumedDirectly) {
      context->resumerStackBottom = bottom;
      context->resumerStackBytes = bytes;
    }
#endif
    context->entry(context->argument);
    std::fprintf(stderr, "virtual gpu: a fiber's entry returned\n");
    std::abort();
  }

#if !defined(__x86_64__)
  static void ucontextMain(unsigned high, unsigned low) {
    auto bits = (static_cast<uintptr_t>(high) << 32) | low;
    main(reinterpret_cast<Context *>(bits));
  }
#endif

  void switchIn() {
#ifdef MOE_FIBER_ASAN
    resumedDirectly = true;
    __sanitizer_start_switch_fiber(&fakeStack, stack, kStackBytes);
#endif
#if defined(__x86_64__)
    moe_vgpu_switch_context(&resumerStackPointer, fiberStackPointer);
#else
    swapcontext(&resumerContext, &fiberContext);
#endif
#ifdef MOE_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fakeStack, nullptr, nullptr);
#endif
  }

  void switchOut(bool dying) {
#ifdef MOE_FIBER_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &fakeStack,
                                   resumerStackBottom, resumerStackBytes);
#else
    (void)dying;
#endif
#if defined(__x86_64__)
    moe_vgpu_switch_context(&fiberStackPointer, resumerStackPointer);
#else
    swapcontext(&fiberContext, &resumerContext);
#endif
#ifdef MOE_FIBER_ASAN
    const void *bottom;
    size_t bytes;
    __sanitizer_finish_switch_fiber(fakeStack, &bottom, &bytes);
    if (resumedDirectly) {
      resumerStackBottom = bottom;
      resumerStackBytes = bytes;
    }
#endif
  }
};

Fiber::Fiber(Entry entry, void *argument) : context(new Context) {
  context->stack = stackPool().take();
  restart(entry, argument);
}

void Fiber::restart(Entry entry, void *argument) {
#ifdef MOE_FIBER_ASAN
  // The stack's previous run (a fiber that ended, or was abandoned after a
  // fault) left ASan's poisoned redzones in it; the new run starts clean.
  ASAN_UNPOISON_MEMORY_REGION(context->stack, kStackBytes);
#endif
  context->entry = entry;
  context->argument = argument;
  context->started = false;
  context->finished = false;
#if defined(__x86_64__)
  // The first switch pops what is laid out here: six callee-saved
  // registers (r12 = the context, r13 = main), then returns into
  // moe_vgpu_fiber_start with the stack 16-byte aligned for its call.
  auto top = reinterpret_cast<uintptr_t>(context->stack + kStackBytes) &
             ~uintptr_t{15};
  auto *slots = reinterpret_cast<uint64_t *>(top - 16 - 7 * 8);
  slots[0] = 0;                                                  // r15
  slots[1] = 0;                                                  // r14
  slots[2] = reinterpret_cast<uint64_t>(&Context::main);         // r13
  slots[3] = reinterpret_cast<uint64_t>(context.get());          // r12
  slots[4] = 0;                                                  // rbx
  slots[5] = 0;                                                  // rbp
  slots[6] = reinterpret_cast<uint64_t>(&moe_vgpu_fiber_start);  // return
  context->fiberStackPointer = slots;
#else
  getcontext(&context->fiberContext);
  context->fiberContext.uc_stack.ss_sp = context->stack;
  context->fiberContext.uc_stack.ss_size = kStackBytes;
  context->fiberContext.uc_link = nullptr;
  auto bits = reinterpret_cast<uintptr_t>(context.get());
  makecontext(&context->fiberContext,
              reinterpret_cast<void (*)()>(&Context::ucontextMain), 2,
              static_cast<unsigned>(bits >> 32),
              static_cast<unsigned>(bits & 0xffffffffu));
#endif
}

Fiber::~Fiber() {
  // A fiber that started and did not finish still has frames on its stack
  // (a launch stopped by a fault): they are abandoned, never unwound, so
  // kernel bodies must own nothing that needs destruction.
  if (!context->stack)
    return;
  if (stackPoolAlive)
    stackPool().give(context->stack);
  else
    unmapStack(context->stack);
}

void Fiber::resume() {
  context->started = true;
  context->switchIn();
}

void Fiber::suspend() { context->switchOut(false); }

void Fiber::transferTo(Fiber &next) {
#if defined(__x86_64__)
  Context &to = *next.context;
  to.started = true;
  to.resumerStackPointer = context->resumerStackPointer;
#ifdef MOE_FIBER_ASAN
  to.resumerStackBottom = context->resumerStackBottom;
  to.resumerStackBytes = context->resumerStackBytes;
  to.resumedDirectly = false;
  __sanitizer_start_switch_fiber(&context->fakeStack, to.stack, kStackBytes);
#endif
  moe_vgpu_switch_context(&context->fiberStackPointer, to.fiberStackPointer);
#ifdef MOE_FIBER_ASAN
  const void *bottom;
  size_t bytes;
  __sanitizer_finish_switch_fiber(context->fakeStack, &bottom, &bytes);
#endif
#else
  // ucontext keeps the resumer's context inside each fiber (its register
  // save area points into itself), so go round through the resumer.
  (void)next;
  suspend();
#endif
}

void Fiber::finish() {
  context->finished = true;
  context->switchOut(true);
  std::fprintf(stderr, "virtual gpu: a finished fiber was resumed\n");
  std::abort();
}

} // namespace moe::rt::virtual_gpu
