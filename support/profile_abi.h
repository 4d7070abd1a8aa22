// The intra-kernel profiler's records, as kernels write them and the runtime reads them
// (dsl/profile.h says what they mark; runtime/profiler.h turns them into traces). A launch of a
// profiled kernel gets a zeroed ProfileBuffer: a header, then `capacity` records, shared out
// evenly among the programs (and their marking warpgroups: `groups` a program). Each marker
// writes its next record in its own share, with no atomic (nothing to wait for: a mark costs its
// thread a clock read and a few stores); a mark past its share writes nothing and adds one to
// `dropped` (counted, never written out of bounds). A record whose time is 0 was not written.
#pragma once

#include <cstdint>

namespace tiledist::runtime {

/// One mark of one program: 32 bytes.
struct ProfileRecord {
  uint64_t time;     // ns: %globaltimer (NVIDIA), s_memrealtime (AMD), the host's steady clock (CPU); 0: unwritten
  uint32_t program;  // the program's linear id: x + nx * (y + ny * z)
  uint16_t unit;     // the SM (NVIDIA) or CU (AMD) it ran on; 0 on the CPU
  uint8_t region;    // the region's index in the kernel's table (ir/profile.h: profile_regions)
  uint8_t phase;     // ir::ProfilePhase: 0 begin, 1 end, 2 instant
  int32_t args[2];   // the mark's arguments (a tile's coordinates), `nargs` of them
  uint8_t nargs;
  uint8_t warpgroup;  // the warpgroup that marked it (thread / 128): warp-specialized kernels' roles
  uint8_t reserved[6];
};
static_assert(sizeof(ProfileRecord) == 32, "a profile record is 32 bytes");

struct ProfileBuffer {
  uint32_t dropped;   // marks past their share
  uint32_t capacity;  // records that follow the header
  uint64_t reserved;
  ProfileRecord* records() { return reinterpret_cast<ProfileRecord*>(this + 1); }
  const ProfileRecord* records() const { return reinterpret_cast<const ProfileRecord*>(this + 1); }
};
static_assert(sizeof(ProfileBuffer) == 16, "the records start 16 bytes in");

/// The records of each marker's share: `capacity` over the markers (programs x groups).
inline uint32_t profile_share(uint32_t capacity, int64_t programs, int groups) {
  return static_cast<uint32_t>(capacity / (uint64_t(programs) * uint64_t(groups)));
}

}  // namespace tiledist::runtime
