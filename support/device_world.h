// What a GPU kernel with distributed ops reads of its world: a trailing kernel parameter that
// points at a DeviceWorld in device memory (the NVPTX lowering reads its fields by these
// offsets). A thread that gives up (a wait past its timeout, a symm_at outside the heap)
// claims the failure record, which lives in mapped host memory so that the host can read it
// after the trap has made the context unusable, fills it, and traps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tiledist::runtime {

inline constexpr int kMaxDeviceRanks = 64;

enum class DeviceFailure : uint32_t {
  none = 0,
  wait_timeout = 1,
  symm_at_outside_heap = 2,
  symm_at_bad_rank = 3,
  barrier_timeout = 4,
  pipeline_timeout = 5  // a TMA/warp-specialized pipeline's mbarrier never completed (a compiler bug)
};

/// The first bytes of every rank's GPU heap belong to the runtime: the device barrier's arrival
/// counter (used on rank 0) and its generation word (on every rank).
inline constexpr uint64_t kBarrierCounterOffset = 0, kBarrierGenerationOffset = 8, kHeapReservedBytes = 256;

/// Written once by the first thread that fails (host-mapped memory).
struct DeviceFailureRecord {
  uint32_t kind;      // DeviceFailure; claimed with a compare-and-swap from 0
  uint32_t block;     // linear index of the program (CTA) that failed
  uint64_t address;   // the signal word waited on, or the pointer given to symm_at
  int64_t expected;   // wait: the value waited for; symm_at: the rank asked for
  int64_t seen;       // wait: the last value read
  uint32_t complete;  // 1 once the fields above are written
  uint32_t kernel;    // kernel_tag() of the failing kernel's name
};

/// What a failure record names a kernel by: the FNV-1a hash of its name (written by the code
/// generator, looked up by the host among the kernels it has launched).
constexpr uint32_t kernel_tag(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

struct DeviceWorld {
  int32_t rank;
  int32_t num_ranks;
  uint64_t heap_size;
  uint64_t timeout_ns;              // a wait gives up after this long (0: never)
  uint64_t failure;                 // device address of the DeviceFailureRecord
  uint64_t bases[kMaxDeviceRanks];  // each rank's heap, mapped into this process
};

static_assert(offsetof(DeviceWorld, rank) == 0 && offsetof(DeviceWorld, num_ranks) == 4 &&
                  offsetof(DeviceWorld, heap_size) == 8 && offsetof(DeviceWorld, timeout_ns) == 16 &&
                  offsetof(DeviceWorld, failure) == 24 && offsetof(DeviceWorld, bases) == 32,
              "codegen/nvptx.cpp reads DeviceWorld by these offsets");
static_assert(offsetof(DeviceFailureRecord, block) == 4 && offsetof(DeviceFailureRecord, address) == 8 &&
                  offsetof(DeviceFailureRecord, expected) == 16 && offsetof(DeviceFailureRecord, seen) == 24 &&
                  offsetof(DeviceFailureRecord, complete) == 32 && offsetof(DeviceFailureRecord, kernel) == 36,
              "codegen/nvptx.cpp writes DeviceFailureRecord by these offsets");

}  // namespace tiledist::runtime
