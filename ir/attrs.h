// The closed vocabularies of op attributes: each an enum with one name table, the names the
// textual IR spells. The verifier checks attributes against them; enum_attr reads one as its
// enum (the lowerings still compare the names in places: to move over).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tiledist::ir {

struct Op;

/// Memory order of atomics, waits and fences (the attribute `order` on each).
enum class MemOrder : uint8_t { relaxed, acquire, release, acq_rel, seq_cst };
/// Who the order is with: the program's threads, the GPU's, the system's (other GPUs, the host).
enum class MemScope : uint8_t { cta, gpu, sys };
/// An atomic read-modify-write (atomic_rmw's `kind`).
enum class RmwKind : uint8_t { add, max, min, xchg, and_, or_, xor_ };
/// A comparison (cmp's `pred`, wait's `cmp`).
enum class CmpPred : uint8_t { eq, ne, lt, le, gt, ge };
/// A reduction (reduce's `kind`).
enum class ReduceKind : uint8_t { sum, max, min, argmax, argmin };
/// Where a profile op stands in its region (profile's `phase`): a scope's start or end, or an
/// instant. (The values are the records' phase byte: support/profile_abi.h.)
enum class ProfilePhase : uint8_t { begin, end, instant };

/// The comparison that holds exactly where `p` does not (of integers: floats' NaN holds neither).
CmpPred negated(CmpPred p);
/// Whether a reduction's result is an index (argmax, argmin), or its combine takes the larger.
inline bool is_arg(ReduceKind k) { return k == ReduceKind::argmax || k == ReduceKind::argmin; }
inline bool takes_larger(ReduceKind k) { return k == ReduceKind::max || k == ReduceKind::argmax; }

const char* name_of(MemOrder v);
const char* name_of(MemScope v);
const char* name_of(RmwKind v);
const char* name_of(CmpPred v);
const char* name_of(ReduceKind v);
const char* name_of(ProfilePhase v);

/// The value named `s`, or nullopt.
template <class E>
std::optional<E> parse_enum(std::string_view s);

/// Op attribute `key` as an E: the verifier has checked it (an op that was not verified and
/// lacks it is a tiledist bug: TD_ASSERT).
template <class E>
E enum_attr(const Op& op, const char* key);

}  // namespace tiledist::ir
