#include "runtime/fiber.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "support/support.h"

#if defined(__SANITIZE_ADDRESS__)
#define TD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TD_ASAN 1
#endif
#endif
#ifdef TD_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tiledist::runtime {

namespace {
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;  // an overflow faults instead of corrupting a neighbour
constexpr size_t kMaxActive = 4096;
thread_local FiberScheduler* t_scheduler = nullptr;
thread_local void* t_starting = nullptr;

// ASan tracks the stack it runs on (its bounds, the fake frames of its locals): every switch
// between the scheduler's stack and a fiber's is announced before (the stack that comes next;
// where to keep the fake frames of the one left, nowhere when it ends) and completed after it
// (the fake frames to take back; on a fiber's first entry, the scheduler's stack). Without ASan
// these do nothing.
void start_switch(void** fake_stack, const void* bottom, size_t size) {
#ifdef TD_ASAN
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
void finish_switch(void* fake_stack, const void** old_bottom, size_t* old_size) {
#ifdef TD_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
#endif
}
/// A stack whose frames never returned (an aborted program; one waiting when the launch failed)
/// still holds ASan's poison around their locals: cleared before the stack serves another
/// fiber, or its pages another mapping.
void forget_frames(char* stack) {
#ifdef TD_ASAN
  ASAN_UNPOISON_MEMORY_REGION(stack + kGuardBytes, kStackBytes);
#endif
}
}  // namespace

FiberScheduler::FiberScheduler(HostKernelFn fn, const Grid& grid, void** args, int64_t scratch_bytes, HostRuntime* rt)
    : fn_(fn), grid_(grid), args_(args), scratch_bytes_((scratch_bytes + 63) / 64 * 64 + 64), rt_(rt) {
  nprog_[0] = grid.x, nprog_[1] = grid.y, nprog_[2] = grid.z;
  rt_->fibers = this;
}

FiberScheduler::~FiberScheduler() {
  for (Fiber* f : active_) {
    forget_frames(f->stack);
    release(f);
  }
  for (char* s : free_stacks_) munmap(s, kStackBytes + kGuardBytes);
  for (char* s : free_scratch_) std::free(s);
  rt_->fibers = nullptr;
}

void FiberScheduler::trampoline() {
  auto* f = static_cast<Fiber*>(t_starting);
  FiberScheduler* s = t_scheduler;
  finish_switch(nullptr, &s->main_stack_bottom_, &s->main_stack_size_);
  s->fn_(s->args_, f->pid, s->nprog_, f->scratch, s->rt_);
  f->done = true;
  start_switch(nullptr, s->main_stack_bottom_, s->main_stack_size_);
  // Returning resumes uc_link: the scheduler.
}

FiberScheduler::Fiber* FiberScheduler::start(int64_t linear) {
  auto* f = new Fiber();
  f->pid[0] = static_cast<int32_t>(linear % grid_.x);
  f->pid[1] = static_cast<int32_t>(linear / grid_.x % grid_.y);
  f->pid[2] = static_cast<int32_t>(linear / (int64_t(grid_.x) * grid_.y));
  if (!free_stacks_.empty()) {
    f->stack = free_stacks_.back();
    free_stacks_.pop_back();
  } else {
    void* m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw Error("tiledist: cannot allocate a fiber stack for a program instance");
    if (mprotect(m, kGuardBytes, PROT_NONE) != 0) {
      munmap(m, kStackBytes + kGuardBytes);
      delete f;
      throw Error("tiledist: cannot protect a fiber stack's guard page (too many program instances blocked at once?)");
    }
    f->stack = static_cast<char*>(m);
  }
  if (!free_scratch_.empty()) {
    f->scratch = free_scratch_.back();
    free_scratch_.pop_back();
  } else {
    f->scratch = static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>(scratch_bytes_)));
    if (!f->scratch) throw Error("tiledist: cannot allocate scratch memory for a program instance");
  }
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack + kGuardBytes;
  f->ctx.uc_stack.ss_size = kStackBytes;
  f->ctx.uc_link = &main_;
  makecontext(&f->ctx, &FiberScheduler::trampoline, 0);
  t_starting = f;
  return f;
}

void FiberScheduler::resume(Fiber* f) {
  for (int i = 0; i < 3; ++i) rt_->pid[i] = f->pid[i];
  current_ = f;
  t_scheduler = this;
  void* fake_stack = nullptr;
  start_switch(&fake_stack, f->stack + kGuardBytes, kStackBytes);
  swapcontext(&main_, &f->ctx);
  finish_switch(fake_stack, nullptr, nullptr);
  current_ = nullptr;
}

void FiberScheduler::release(Fiber* f) {
  free_stacks_.push_back(f->stack);
  free_scratch_.push_back(f->scratch);
  delete f;
}

void FiberScheduler::yield() {
  TD_ASSERT(current_ != nullptr, "yield outside of a program instance");
  Fiber* f = current_;
  start_switch(&f->fake_stack, main_stack_bottom_, main_stack_size_);
  swapcontext(&f->ctx, &main_);
  finish_switch(f->fake_stack, nullptr, nullptr);
}

void FiberScheduler::abort_current(std::string&& message) {
  TD_ASSERT(current_ != nullptr, "abort outside of a program instance");
  if (!failed_) {
    failed_ = true;
    error_ = std::move(message);
  }
  std::string().swap(message);  // freed here: its owner's frame is never unwound
  current_->done = true;
  forget_frames(current_->stack);
  start_switch(nullptr, main_stack_bottom_, main_stack_size_);
  setcontext(&main_);
  std::abort();  // not reached
}

void FiberScheduler::run() {
  const int64_t total = grid_.size();
  int64_t next = 0;
  int idle_rounds = 0;
  while (next < total || !active_.empty()) {
    progress_ = false;
    size_t before = active_.size();
    for (auto it = active_.begin(); it != active_.end() && !failed_;) {
      resume(*it);
      if ((*it)->done) {
        release(*it);
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    if (failed_) break;
    bool idle = !progress_ && active_.size() == before;
    // Start more programs: those that never block run to completion one after another; when
    // the running ones are stuck, start as many again as are blocked (the one that signals
    // them may not have started yet).
    size_t room = kMaxActive - std::min(kMaxActive, active_.size());
    size_t budget = idle ? std::min(room, std::max<size_t>(1, active_.size())) : (room > 0 ? 1 : 0);
    if (idle && budget == 0 && next < total)
      throw Error(str_cat("tiledist: ", kMaxActive, " program instances of kernel '", rt_->kernel,
                          "' are blocked at once and more are waiting to start; use a smaller grid"));
    while (next < total && budget > 0 && !failed_) {
      Fiber* f = start(next++);
      resume(f);
      if (f->done) {
        release(f);
      } else {
        active_.push_back(f);
        --budget;
      }
      idle = false;
    }
    if (failed_) break;
    if (idle) {
      // Everyone waits on another rank: give its process the core.
      if (++idle_rounds > 64)
        usleep(50);
      else
        sched_yield();
    } else {
      idle_rounds = 0;
    }
  }
  if (failed_) throw Error(error_);
}

}  // namespace tiledist::runtime
