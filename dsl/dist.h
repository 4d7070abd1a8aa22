// The distributed primitives of Triton-distributed (dist::) and the OpenSHMEM-style device
// calls (shmem::). Scopes and memory orders are explicit arguments, spelled as the seed
// spells them. Pointers passed as `symmetric` must point into the symmetric heap.
#pragma once

#include "dsl/tl.h"

namespace tiledist {
namespace dist {

enum class SigOp { set, add };
enum class CommScope { intra_node, inter_node };
enum class Scope { gpu, sys };
enum class Semantic { acquire, relaxed };

using tl::Operand;
using tl::SrcLoc;
using tl::Tensor;

/// This rank and the number of ranks.
Tensor rank(SrcLoc loc = SrcLoc::current());
Tensor num_ranks(SrcLoc loc = SrcLoc::current());
/// The address of symmetric `ptr` (scalar or block of pointers) on `rank`.
Tensor symm_at(const Tensor& ptr, const Operand& rank, SrcLoc loc = SrcLoc::current());
/// Sets or adds `signal` to the signal word `ptr` on `rank`, with release semantics: writes
/// before it are visible to whoever observes the signal.
void notify(const Tensor& ptr, const Operand& rank, const Operand& signal = 1, SigOp sig_op = SigOp::set,
            CommScope comm_scope = CommScope::intra_node, SrcLoc loc = SrcLoc::current());
/// Waits until each of the `n` signal words from `ptrs` equals `expected`; returns a token
/// for consume_token.
Tensor wait(const Tensor& ptrs, const Operand& n, Scope scope = Scope::gpu, Semantic semantic = Semantic::acquire,
            const Operand& expected = 1, SrcLoc loc = SrcLoc::current());
/// `value`, ordered after the wait that produced `token` (loads through it see the data).
Tensor consume_token(const Tensor& value, const Tensor& token, SrcLoc loc = SrcLoc::current());

}  // namespace dist

namespace shmem {

using tl::Operand;
using tl::SrcLoc;
using tl::Tensor;

enum class Cmp { eq, ne, gt, ge, lt, le };
inline constexpr dist::SigOp SIGNAL_SET = dist::SigOp::set;
inline constexpr dist::SigOp SIGNAL_ADD = dist::SigOp::add;

Tensor my_pe(SrcLoc loc = SrcLoc::current());
Tensor n_pes(SrcLoc loc = SrcLoc::current());
/// nvshmem_ptr: the address of symmetric `ptr` on `pe`.
Tensor ptr(const Tensor& p, const Operand& pe, SrcLoc loc = SrcLoc::current());

// putmem / getmem / putmem_signal, non-blocking (_nbi, complete at quiet) and blocking, by a
// block, a warp or a thread. On the CPU backend every form completes before it returns.
#define TILEDIST_SHMEM_COPIES(suffix)                                                                                 \
  void putmem##suffix(const Tensor& dest, const Tensor& source, const Operand& nbytes, const Operand& pe,             \
                      SrcLoc loc = SrcLoc::current());                                                                \
  void getmem##suffix(const Tensor& dest, const Tensor& source, const Operand& nbytes, const Operand& pe,             \
                      SrcLoc loc = SrcLoc::current());                                                                \
  void putmem_signal##suffix(const Tensor& dest, const Tensor& source, const Operand& nbytes, const Tensor& sig_addr, \
                             const Operand& signal, dist::SigOp sig_op, const Operand& pe,                            \
                             SrcLoc loc = SrcLoc::current());
TILEDIST_SHMEM_COPIES(_block)
TILEDIST_SHMEM_COPIES(_warp)
TILEDIST_SHMEM_COPIES(_thread)
TILEDIST_SHMEM_COPIES(_nbi_block)
TILEDIST_SHMEM_COPIES(_nbi_warp)
TILEDIST_SHMEM_COPIES(_nbi_thread)
#undef TILEDIST_SHMEM_COPIES

/// Updates the signal word `sig_addr` on `pe` (release semantics).
void signal_op(const Tensor& sig_addr, const Operand& signal, dist::SigOp sig_op, const Operand& pe,
               SrcLoc loc = SrcLoc::current());
/// Waits until the local signal word compares to `value` as `cmp` says; returns its value.
Tensor signal_wait_until(const Tensor& sig_addr, Cmp cmp, const Operand& value, SrcLoc loc = SrcLoc::current());
/// Orders puts to each peer (fence) / completes all outstanding puts (quiet).
void fence(SrcLoc loc = SrcLoc::current());
void quiet(SrcLoc loc = SrcLoc::current());
/// Device-side barrier of all ranks (barrier_all also completes outstanding puts).
void barrier_all(SrcLoc loc = SrcLoc::current());
void sync_all(SrcLoc loc = SrcLoc::current());
/// Remote atomics on symmetric `ptr` at `pe`.
void atomic_add(const Tensor& ptr, const Operand& value, const Operand& pe, SrcLoc loc = SrcLoc::current());
Tensor atomic_fetch_add(const Tensor& ptr, const Operand& value, const Operand& pe, SrcLoc loc = SrcLoc::current());
Tensor atomic_compare_swap(const Tensor& ptr, const Operand& cond, const Operand& value, const Operand& pe,
                           SrcLoc loc = SrcLoc::current());

}  // namespace shmem
}  // namespace tiledist
