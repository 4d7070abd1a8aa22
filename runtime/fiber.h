// Program instances of a host launch as fibers, so that one spinning in a wait yields to the
// others (the one that will signal it among them) on any number of cores.
#pragma once

#include <ucontext.h>

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "runtime/host.h"

namespace tiledist::runtime {

class FiberScheduler {
 public:
  FiberScheduler(HostKernelFn fn, const Grid& grid, void** args, int64_t scratch_bytes, HostRuntime* rt);
  ~FiberScheduler();
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  /// Runs every program instance to completion; throws Error with the first failure.
  void run();
  /// From a program: lets the others run; returns when this one is resumed.
  void yield();
  /// From a program: ends it and fails the launch with `message`, which it takes. The program's
  /// stack is dropped, not unwound: what its frames own leaks.
  [[noreturn]] void abort_current(std::string&& message);
  /// From a program: something it waited for happened (a round is not idle).
  void note_progress() { progress_ = true; }
  /// From a program: how many device barriers it has entered before this one.
  int64_t next_barrier_index() { return current_->barriers++; }

 private:
  struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    char* scratch = nullptr;
    int32_t pid[3];
    int64_t barriers = 0;
    bool done = false;
    void* fake_stack = nullptr;  // ASan's fake frames while the fiber is switched out
  };
  static void trampoline();
  Fiber* start(int64_t linear_pid);
  void resume(Fiber* f);
  void release(Fiber* f);

  HostKernelFn fn_;
  Grid grid_;
  void** args_;
  int64_t scratch_bytes_;
  HostRuntime* rt_;
  int32_t nprog_[3];
  // (zeroed: ASan's swapcontext reads uc_stack, which swapcontext never writes)
  ucontext_t main_{};
  // The stack the scheduler runs on, as ASan knows it: each switch back to it names it.
  const void* main_stack_bottom_ = nullptr;
  size_t main_stack_size_ = 0;
  Fiber* current_ = nullptr;
  std::list<Fiber*> active_;
  std::vector<char*> free_stacks_, free_scratch_;
  bool progress_ = false;
  bool failed_ = false;
  std::string error_;
};

}  // namespace tiledist::runtime
