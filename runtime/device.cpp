// The distributed ops of host kernels. They run inside a program instance (a fiber): waits
// yield instead of blocking, and any failure ends the program with a message naming the
// kernel, rank, program and address, and tells the peers so that their waits end too.
#include <atomic>
#include <chrono>
#include <cstring>

#include "runtime/fiber.h"
#include "runtime/heap_labels.h"
#include "runtime/world.h"
#include "support/support.h"

namespace tiledist::runtime {
namespace {

using Clock = std::chrono::steady_clock;

HostRuntime& runtime_of(void* rt) { return *static_cast<HostRuntime*>(rt); }

std::string where(const HostRuntime& rt) {
  return str_cat("kernel '", rt.kernel, "' on rank ", rt.world->rank(), ", program (", rt.pid[0], ", ", rt.pid[1], ", ",
                 rt.pid[2], ")");
}

/// "symmetric offset 64 on rank 1" for an address in some rank's heap (and what it holds, where
/// its owner said: heap_labels.h), else the address.
std::string describe(const World& w, const void* p) {
  const char* c = static_cast<const char*>(p);
  for (int r = 0; r < w.size(); ++r)
    if (w.local(r) && c >= w.base(r) && c < w.base(r) + w.heap_size()) {
      const std::string label = heap_label(Heap::host, static_cast<size_t>(c - w.base(r)));
      return str_cat("symmetric offset ", c - w.base(r), " on rank ", r, label.empty() ? "" : " (", label,
                     label.empty() ? "" : ")");
    }
  return str_cat("address ", p, " (outside the symmetric heap)");
}

/// Ends the program with `message` and tells the peers. Its frames are dropped, not unwound:
/// the caller builds the message in a statement of its own and moves it here, and holds nothing
/// else that owns memory (a temporary of this call's expression included), or that leaks.
[[noreturn]] void fail(HostRuntime& rt, std::string&& message) {
  message.insert(0, "tiledist: ");
  if (rt.world) rt.world->report_failure(message);
  rt.fibers->abort_current(std::move(message));
}

bool compare(int64_t v, int32_t cmp, int64_t want) {
  switch (cmp) {
    case 0:
      return v == want;
    case 1:
      return v != want;
    case 2:
      return v < want;
    case 3:
      return v <= want;
    case 4:
      return v > want;
    default:
      return v >= want;
  }
}
const char* cmp_name(int32_t cmp) {
  static const char* names[] = {"==", "!=", "<", "<=", ">", ">="};
  return names[cmp < 0 || cmp > 5 ? 0 : cmp];
}

int64_t load_word(const void* p, int32_t bytes, bool acquire) {
  auto order = acquire ? std::memory_order_acquire : std::memory_order_relaxed;
  if (bytes == 4) return std::atomic_ref<int32_t>(*static_cast<int32_t*>(const_cast<void*>(p))).load(order);
  return std::atomic_ref<int64_t>(*static_cast<int64_t*>(const_cast<void*>(p))).load(order);
}

/// Spins (yielding to other programs) until `done()`; ends the program on timeout or when a
/// peer has failed. `describe_wait` says what was awaited, for the message.
template <class Done, class Describe>
void wait_for(HostRuntime& rt, Done done, Describe describe_wait) {
  if (done()) return;
  World& w = *rt.world;
  auto start = Clock::now();
  auto limit = std::chrono::duration<double>(w.wait_timeout());
  for (uint64_t spins = 1;; ++spins) {
    rt.fibers->yield();
    if (done()) break;
    if (spins % 256 == 0) {
      std::string problem = w.peer_problem();
      if (!problem.empty()) {
        problem = str_cat(where(rt), ": ", describe_wait(), " ended: ", problem);
        fail(rt, std::move(problem));
      }
      if (Clock::now() - start > limit) {
        std::string message = str_cat("wait timed out after ", w.wait_timeout(), " s in ", where(rt), ": ",
                                      describe_wait(), " ($TILEDIST_WAIT_TIMEOUT)");
        fail(rt, std::move(message));
      }
    }
  }
  rt.fibers->note_progress();
}

}  // namespace
}  // namespace tiledist::runtime

using namespace tiledist;
using namespace tiledist::runtime;

extern "C" int32_t tiledist_rank(void* rt) { return runtime_of(rt).world->rank(); }
extern "C" int32_t tiledist_num_ranks(void* rt) { return runtime_of(rt).world->size(); }

extern "C" void* tiledist_symm_at(void* rtp, void* p, int64_t rank) {
  HostRuntime& rt = runtime_of(rtp);
  std::string err = rt.world->check_at(p, rank);
  if (!err.empty()) {
    err = str_cat("symm_at in ", where(rt), ": ", err);
    fail(rt, std::move(err));
  }
  return rt.world->base(static_cast<int>(rank)) + (static_cast<char*>(p) - rt.world->base(rt.world->rank()));
}

extern "C" int64_t tiledist_wait(void* rtp, void* p, int32_t bytes, int32_t n, int32_t cmp, int64_t value,
                                 int32_t acquire) {
  HostRuntime& rt = runtime_of(rtp);
  if (n < 0) {
    std::string message = str_cat("wait in ", where(rt), ": negative word count ", n);
    fail(rt, std::move(message));
  }
  char* words = static_cast<char*>(p);
  int64_t last = 0;
  for (int32_t i = 0; i < n; ++i) {
    void* word = words + int64_t(i) * bytes;
    wait_for(
        rt, [&] { return compare(last = load_word(word, bytes, acquire != 0), cmp, value); },
        [&] {
          return str_cat("the signal at ", describe(*rt.world, word), " (word ", i, " of ", n, ") is ", last,
                         ", waiting for ", cmp_name(cmp), " ", value);
        });
  }
  return last;
}

extern "C" void tiledist_barrier(void* rtp) {
  HostRuntime& rt = runtime_of(rtp);
  World& w = *rt.world;
  ControlBlock& ctl = w.control();
  int64_t k = rt.fibers->next_barrier_index();
  if (static_cast<int64_t>(rt.barrier_arrivals.size()) <= k) rt.barrier_arrivals.resize(k + 1, 0);
  // The last local program to arrive announces this rank; then all wait for all ranks.
  int64_t target = rt.barrier_base + k + 1;
  if (++rt.barrier_arrivals[k] == rt.grid_size) ctl.device_barrier[w.rank()].store(target, std::memory_order_release);
  wait_for(
      rt,
      [&] {
        for (int r = 0; r < w.size(); ++r)
          if (ctl.device_barrier[r].load(std::memory_order_acquire) < target) return false;
        return true;
      },
      [&] {
        std::string missing;
        for (int r = 0; r < w.size(); ++r)
          if (ctl.device_barrier[r].load() < target) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        return str_cat("barrier_all #", k + 1, " of this launch (", rt.barrier_arrivals[k], " of ", rt.grid_size,
                       " local programs arrived; ranks not there yet: ", missing, ")");
      });
}

extern "C" void tiledist_memcpy(void* rtp, void* dst, const void* src, int64_t bytes) {
  HostRuntime& rt = runtime_of(rtp);
  if (bytes < 0) {
    std::string message = str_cat("putmem/getmem in ", where(rt), ": negative size ", bytes);
    fail(rt, std::move(message));
  }
  std::memmove(dst, src, static_cast<size_t>(bytes));
}
