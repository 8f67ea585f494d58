//===- Fiber.h - stackful coroutines for the thread engine ------*- C++ -*-===//
//
// Private to lib/Runtime/VirtualGpu. A Fiber runs a function on its own
// stack and switches to and from the thread that resumes it; the thread
// engine runs every CUDA thread of a block as one, so that a barrier is a
// couple of context switches on one OS thread rather than a wake-up of
// hundreds of OS threads. On x86-64 a switch saves the callee-saved
// registers and the stack pointer (a few nanoseconds); elsewhere it falls
// back to ucontext. Stacks are mmap'ed with a guard page below them, so a
// kernel that overflows its stack faults at once instead of corrupting a
// neighbour, and are reused from a per-OS-thread pool.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_RUNTIME_VIRTUALGPU_FIBER_H
#define MOE_LIB_RUNTIME_VIRTUALGPU_FIBER_H

#include <cstddef>
#include <memory>

namespace moe::rt::virtual_gpu {

class FiberStack;

class Fiber {
public:
  using Entry = void (*)(void *argument);

  /// A fiber that, when first resumed, calls entry(argument) on a stack
  /// from this OS thread's pool. `entry` must not return: it ends by
  /// calling finish().
  Fiber(Entry entry, void *argument);
  ~Fiber();
  Fiber(const Fiber &) = delete;
  Fiber &operator=(const Fiber &) = delete;

  /// Makes the fiber start afresh at entry(argument) on its stack, as if
  /// just constructed: the engine reuses one fiber per CUDA thread across
  /// the blocks it runs. Only between runs (finished, abandoned or never
  /// resumed).
  void restart(Entry entry, void *argument);

  /// Switches from the calling OS thread's current context into this fiber
  /// until it calls suspend() or finish().
  void resume();
  /// From inside this fiber: back to whoever resumed it.
  void suspend();
  /// From inside this fiber, as its last act: back to whoever resumed it,
  /// never to return here. The stack goes back to the pool.
  [[noreturn]] void finish();

  /// The stack size every fiber gets.
  static constexpr size_t kStackBytes = 256 * 1024;

private:
  struct Context;
  std::unique_ptr<Context> context;
};

} // namespace moe::rt::virtual_gpu

#endif // MOE_LIB_RUNTIME_VIRTUALGPU_FIBER_H
