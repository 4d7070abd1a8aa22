/// @file
/// The distributed primitives of Triton-distributed (dist::) and the OpenSHMEM-style device
/// calls (shmem::). Scopes and memory orders are explicit arguments, spelled as
/// Triton-distributed spells them. Pointers passed as `symmetric` must point into the symmetric
/// heap.
#pragma once

#include "dsl/tl.h"

namespace tiledist {
/// Triton-distributed's primitives (`triton.distributed.language`), for kernels: ranks, the
/// addresses of symmetric buffers on peers, and signals to notify and wait on. Like tl:: ops
/// they trace at the caller's line and throw Error there for operands that do not fit.
namespace dist {

/// How a signal changes its word: `set` stores the value, `add` adds it.
enum class SigOp { set, add };
/// Where notify's peer is (Triton-distributed's comm_scope). Accepted, and without effect: every
/// notify is ordered at system scope.
enum class CommScope { intra_node, inter_node };
/// Who a wait's acquire orders with: the GPU's threads (`gpu`) or the system's (`sys`: other
/// GPUs, the host).
enum class Scope { gpu, sys };
/// A wait's memory order: `acquire` (reads after it see what was written before the signals)
/// or `relaxed`.
enum class Semantic { acquire, relaxed };

using tl::Operand;
using tl::SrcLoc;
using tl::Tensor;

/// This rank and the number of ranks: i32 scalars.
///@{
Tensor rank(SrcLoc loc = SrcLoc::current());
Tensor num_ranks(SrcLoc loc = SrcLoc::current());
///@}
/// The address of symmetric `ptr` (scalar or block of pointers) on `rank` (an integer scalar).
Tensor symm_at(const Tensor& ptr, const Operand& rank, SrcLoc loc = SrcLoc::current());
/// Sets or adds `signal` to the signal word `ptr` on `rank`, with release semantics: writes
/// before it are visible to whoever observes the signal. `ptr`: a symmetric scalar pointer to
/// an i32 or i64 word; the release is at system scope whatever `comm_scope` says.
void notify(const Tensor& ptr, const Operand& rank, const Operand& signal = 1, SigOp sig_op = SigOp::set,
            CommScope comm_scope = CommScope::intra_node, SrcLoc loc = SrcLoc::current());
/// Waits until each of the `n` signal words from `ptrs` equals `expected`; returns a token
/// for consume_token. `ptrs`: a scalar pointer to the first of `n` consecutive i32 or i64
/// words, or a block of such pointers (the words from each, compared with `expected` or, a
/// block of its shape, the element beside it); the program's threads poll them together.
/// The token's value: the last word's, for a scalar pointer; 0 for a block.
Tensor wait(const Tensor& ptrs, const Operand& n, Scope scope = Scope::gpu, Semantic semantic = Semantic::acquire,
            const Operand& expected = 1, SrcLoc loc = SrcLoc::current());
/// `value`, ordered after the wait that produced `token` (loads through it see the data).
Tensor consume_token(const Tensor& value, const Tensor& token, SrcLoc loc = SrcLoc::current());

}  // namespace dist

/// OpenSHMEM-style device calls, named as NVSHMEM's (`libshmem_device` in Triton-distributed):
/// PEs are ranks, and pointers to remote data are symmetric.
namespace shmem {

using tl::Operand;
using tl::SrcLoc;
using tl::Tensor;

/// signal_wait_until's comparisons: ==, !=, >, >=, <, <= (NVSHMEM_CMP_EQ...).
enum class Cmp { eq, ne, gt, ge, lt, le };
/// NVSHMEM's names of the signal operations (NVSHMEM_SIGNAL_SET, NVSHMEM_SIGNAL_ADD).
///@{
inline constexpr dist::SigOp SIGNAL_SET = dist::SigOp::set;
inline constexpr dist::SigOp SIGNAL_ADD = dist::SigOp::add;
///@}

/// This PE and the number of PEs: dist::rank and dist::num_ranks.
///@{
Tensor my_pe(SrcLoc loc = SrcLoc::current());
Tensor n_pes(SrcLoc loc = SrcLoc::current());
///@}
/// nvshmem_ptr: the address of symmetric `ptr` on `pe`.
Tensor ptr(const Tensor& p, const Operand& pe, SrcLoc loc = SrcLoc::current());

/// putmem / getmem / putmem_signal, non-blocking (_nbi, complete at quiet) and blocking, by a
/// block, a warp or a thread. On the CPU backend every form completes before it returns.
/// Declares, for each `suffix` (_block, _warp, _thread, _nbi_block, _nbi_warp, _nbi_thread):
/// - `putmem<suffix>(dest, source, nbytes, pe)`: copies `nbytes` bytes from local `source` to
///   symmetric `dest` on `pe`;
/// - `getmem<suffix>(dest, source, nbytes, pe)`: copies from symmetric `source` on `pe` to
///   local `dest`;
/// - `putmem_signal<suffix>(dest, source, nbytes, sig_addr, signal, sig_op, pe)`: putmem, then
///   signal_op on `pe`'s `sig_addr`.
///
/// `dest` and `source` are scalar pointers.
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

/// Updates the signal word `sig_addr` (a symmetric scalar pointer to i32 or i64) on `pe`
/// (release semantics, system scope).
void signal_op(const Tensor& sig_addr, const Operand& signal, dist::SigOp sig_op, const Operand& pe,
               SrcLoc loc = SrcLoc::current());
/// Waits until the local signal word compares to `value` as `cmp` says; returns its value
/// (acquire, system scope). `sig_addr` may be a block of pointers, `value` a block of its
/// shape: until every word compares to its value (OpenSHMEM's wait_until_all_vector, the words
/// anywhere); returns 0.
Tensor signal_wait_until(const Tensor& sig_addr, Cmp cmp, const Operand& value, SrcLoc loc = SrcLoc::current());
/// Orders puts to each peer (fence) / completes all outstanding puts (quiet).
///@{
void fence(SrcLoc loc = SrcLoc::current());
void quiet(SrcLoc loc = SrcLoc::current());
///@}
/// Device-side barrier of all ranks (barrier_all also completes outstanding puts).
///@{
void barrier_all(SrcLoc loc = SrcLoc::current());
void sync_all(SrcLoc loc = SrcLoc::current());
///@}
/// Remote atomics on the scalar at symmetric `ptr` on `pe` (acq_rel, system scope): add
/// `value`; add it and return the old value; or, where it equals `cond`, set it to `value` and
/// return the old value.
///@{
void atomic_add(const Tensor& ptr, const Operand& value, const Operand& pe, SrcLoc loc = SrcLoc::current());
Tensor atomic_fetch_add(const Tensor& ptr, const Operand& value, const Operand& pe, SrcLoc loc = SrcLoc::current());
Tensor atomic_compare_swap(const Tensor& ptr, const Operand& cond, const Operand& value, const Operand& pe,
                           SrcLoc loc = SrcLoc::current());
///@}

}  // namespace shmem
}  // namespace tiledist
