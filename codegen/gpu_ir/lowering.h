// The lowering of the GPU IR (the GPU passes' output, codegen/passes/): every block tensor has a
// layout (ir/layout.h), so the lowering decides nothing about where elements live. A tensor is
// this thread's registers in its layout's register order (LinearLayout's `reg` input); the
// register's coordinates are its register bits' bases XOR the thread's lane and warp bases.
// Each op is lowered from its operands' and result's layouts alone:
// - elementwise ops work register by register (operands share the result's layout); a multiply
//   and an add may fuse into one fma (LLVM's `contract`, as Triton's enable_fp_fusion default);
// - expand_dims, broadcast, trans and convert_layout take each result register from the
//   operand's register that holds the same element in the same thread where one does (the
//   layouts' lane and warp bases agree), else go through shared memory;
// - loads and stores move as many contiguous registers at once as the axis analysis allows;
// - reductions combine registers, then lanes by XOR shuffles, then warps through shared memory
//   (ir::reduce_plan);
// - dot is mma.sync (MFMA on AMD) over registers whose dot-operand layouts hold its fragments, or on sm_90a
//   wgmma over shared-memory views (and A registers), its group left in flight until its result
//   is read (wgmma_wait);
// - local_alloc, async_copy (cp.async), async_commit, async_wait and local_load (ldmatrix where
//   the layouts allow it) are the pipelining pass's shared-memory ring;
// - the distributed ops (wait, symm_at, memcpy, the barrier of every rank) are world_ops.h's
//   code, thread 0's work reaching the others through shared memory.
// A kernel with an op this lowering does not take (`refused` says which) is an error naming it
// (lower_gpu). On AMD targets the same, in 64-lane waves, dots on MFMA, shared memory a static
// LDS array (GpuTarget::size_shared_memory).
//
// Private to codegen/gpu_ir/: lowering.cpp (entry, values, dispatch, elementwise), registers.cpp
// (coordinates; register moves and shared-memory exchanges), memory.cpp (global memory, shared
// buffers, async copies), reduce.cpp, dot.cpp, control_flow.cpp, tma.cpp, warp_specialization.cpp,
// distributed.cpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "codegen/axis_info.h"
#include "codegen/codegen.h"
#include "codegen/elements.h"
#include "codegen/gpu_ir/world_ops.h"
#include "codegen/gpu_target.h"
#include "ir/layout.h"

#pragma GCC visibility push(hidden)
namespace tiledist::codegen::gpu_ir {

/// A value in generated code: a uniform scalar, a tensor's registers, or a shared buffer.
struct LVal {
  llvm::Value* scalar = nullptr;
  std::vector<llvm::Value*> regs;
  /// 16-bit and 8-bit tensors read by ldmatrix: each 32-bit word as ldmatrix handed it out
  /// (registers w * n .. w * n + n - 1, n = 4 / element bytes: what mma.sync takes); empty
  /// otherwise.
  std::vector<llvm::Value*> words;
  /// A local_load whose one user is a dot later in its block: word w, loaded (with the others of
  /// its ldmatrix) where the dot first asks for it, so that operand fragments live only through
  /// the k step that takes them.
  std::shared_ptr<std::function<llvm::Value*(int64_t)>> lazy_word;
  /// 16-bit float tensors made by a cast, and f8 tensors loaded or made by a cast: each
  /// register's memory bits (i16, i8), so that packing them for a matrix unit does not round
  /// (or, for f8, search its table) again; empty otherwise.
  std::vector<llvm::Value*> bits;
  /// The 16-bit tensors made by a cast: the f32 registers each was rounded from, so that a pair
  /// packs with one conversion of two (cvt.rn.bf16x2.f32); empty otherwise.
  std::vector<llvm::Value*> wide;
  int64_t smem = -1;  // a memdesc: its byte offset in shared memory
  /// A tensor in a #shared layout (a wgmma operand read in place): its tile's shared address
  /// (i32), laid out as the tensor type's layout says.
  llvm::Value* view = nullptr;

  static LVal of(llvm::Value* scalar) {
    LVal g;
    g.scalar = scalar;
    return g;
  }
};

/// Why `f` (GPU IR) cannot be lowered here yet: the first op this lowering does not take, or
/// empty where it takes them all.
std::string unsupported_op(const ir::Function& f, const GpuTarget& target);

class LayoutLowering : public WorldOps {
 public:
  LayoutLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make);
  GpuModule run();
  /// Why this lowering does not take the kernel (unsupported_op for its target), or empty.
  std::string refused() const { return unsupported_op(f_, *target_); }

 private:
  LayoutLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make,
                 std::unique_ptr<llvm::Module> m);
  [[noreturn]] void unsupported(const ir::Op& op, const std::string& what);

  // ---- lowering.cpp
  // Elements' hooks
  llvm::Value* math(OpCode code, llvm::Value* x) override { return target_->math(code, x); }
  llvm::Value* bf16_bits(llvm::Value* v) override {
    if (!target_->bf16_convert()) return Elements::bf16_bits(v);
    return b_.CreateBitCast(b_.CreateFPTrunc(v, b_.getBFloatTy()), b_.getInt16Ty());
  }
  llvm::Value* f8_to_bits(llvm::Value* v, DType d) override { return target_->f8_to_bits(v, d); }
  llvm::Value* f8_from_bits(llvm::Value* bits, DType d) override { return target_->f8_from_bits(bits, d); }

  LVal& val(const ir::Value* v);
  void define(const ir::Op& op, LVal g) { vals_[op.results[0].get()] = std::move(g); }
  void emit_block(const ir::Block& block);
  void emit(const ir::Op& op);
  void emit_elementwise(const ir::Op& op);
  /// Inline PTX, convergent: LLVM may not move it into or out of a branch (a warp's or warpgroup's
  /// `bar.warp.sync`, `wgmma`, `setmaxnreg` run by the threads that reach it where it stands; a
  /// `bar.warp.sync` between two of thread 0's copies was merged into thread 0's branch).
  llvm::Value* ptx(llvm::Type* ret, const std::string& text, std::string constraints,
                   const std::vector<llvm::Value*>& args) {
    llvm::Value* call = inline_asm(b_, ret, text, std::move(constraints), args);
    llvm::cast<llvm::CallInst>(call)->addFnAttr(llvm::Attribute::Convergent);
    return call;
  }
  /// A CTA barrier; first every wgmma group in flight completes (the barrier orders later
  /// writes into shared memory after every warpgroup's reads of it, theirs included).
  void barrier() {
    wgmma_wait_all();
    if (consumers_)
      ptx(b_.getVoidTy(), str_cat("bar.sync 1, ", threads_, ";"), "", {});  // (the consumers only)
    else
      target_->barrier();
  }

  // ---- registers.cpp: where a layout's registers lie, and moving them
  const ir::LinearLayout& linear(const ir::Type& t);
  /// This thread's part of each coordinate: the XOR of the lane and warp bases of its bits.
  std::vector<llvm::Value*> thread_coords(const ir::LinearLayout& ll);
  /// Whether this thread holds the first copy of its elements under a layout whose duplicate
  /// bits (LinearLayout::duplicate_bits) are `dup` (true where lanes and warps hold no copies of
  /// each other's): the one that stores a replicated tensor, so that no copy is stored after a
  /// thread has read it back (a sum stored in place).
  llvm::Value* holds_first_copy(const std::array<int64_t, 3>& dup);
  /// The coordinates of register r in this thread.
  std::vector<llvm::Value*> coords(const ir::LinearLayout& ll, int64_t r);
  /// The same from this thread's part (`mine`, thread_coords(ll)) computed once.
  std::vector<llvm::Value*> at_register(std::vector<llvm::Value*> mine, const ir::LinearLayout& ll, int64_t r);
  /// The register (in `ll`) whose own bits move to `c`, or -1.
  static int64_t register_at(const ir::LinearLayout& ll, const std::vector<int64_t>& c);
  /// Coordinates of `to`'s tensor as `from`'s (expand_dims drops an axis, broadcast zeroes the
  /// broadcast ones, trans permutes).
  using CoordMap = std::function<std::vector<int64_t>(const std::vector<int64_t>&)>;
  /// For each register of `to`, the register of `from` holding its element (mapped by `map`) in
  /// every thread; null where a thread would need another's.
  static std::optional<std::vector<int64_t>> gather(const ir::LinearLayout& from, const ir::LinearLayout& to,
                                                    const CoordMap& map);
  /// `v` laid out as `to_type` says, element (mapped) for element: by registers where gather
  /// allows, else through shared memory.
  LVal move(const ir::Value* v, const ir::Type& to_type, const CoordMap& map);
  /// Writes every register of `v` into shared memory at `base` (bytes), each element at its
  /// row-major place (4 bytes an element, 8 for pointers and 64-bit values, 1 for booleans);
  /// returns that size. Copies of an element write the same value. `as_bits`: an f8 tensor's
  /// memory bits (LVal::bits), zero-extended to 4 bytes, rather than its values.
  int64_t stage(const ir::Value* v, llvm::Value* base, bool as_bits = false);
  static int64_t element_bytes(const ir::Type& t);
  /// The element at `c` of each register of `ll`'s tensor, row-major flat index (i32).
  llvm::Value* flat_index(const std::vector<llvm::Value*>& c, const std::vector<int64_t>& shape);
  void emit_arange(const ir::Op& op);
  /// Scratch shared memory for one op's exchange, above the live buffers.
  llvm::Value* scratch(int64_t bytes);
  llvm::Value* smem_at(llvm::Value* byte_offset);

  // ---- memory.cpp
  void emit_load(const ir::Op& op);
  void emit_store(const ir::Op& op);
  void emit_prefetch(const ir::Op& op);
  /// A scalar atomic: thread 0 performs it for the program, after
  /// the program's threads meet where it releases, before they go on where it acquires; the
  /// old value (0 where its mask is off) reaches every thread through shared memory.
  void emit_atomic(const ir::Op& op);
  /// An atomic of a tensor: each element's by the thread holding its first copy (masked), in the
  /// op's order and scope, the program's threads meeting around them as for a scalar's; the old
  /// values (where used) reach the other copies through shared memory.
  void emit_atomic_tensor(const ir::Op& op);
  /// How many contiguous registers of a tensor at `ptr` (masked by `mask`) move as one access.
  /// Elements a load or store of `ptr` moves at once along dimension `dim` (-1: the one a
  /// thread's registers run along).
  int64_t vector_width(const ir::Type& t, const ir::Value* ptr, const ir::Value* mask, int dim = -1);
  /// The type a vector of `vt` is loaded and stored as: itself, or 32-bit words for 8 bytes or
  /// more of byte-wide elements (one access, as its alignment allows).
  llvm::Type* memory_words(llvm::FixedVectorType* vt);
  /// The value of type memory_words(vt) that holds `elems` (vt's elements, in order), and the
  /// k-th element of vt back out of such a value.
  llvm::Value* to_words(llvm::FixedVectorType* vt, const std::vector<llvm::Value*>& elems);
  llvm::Value* from_words(llvm::FixedVectorType* vt, llvm::Value* w, unsigned k);
  void plan_shared_buffers();
  void emit_local_alloc(const ir::Op& op);
  void emit_async_copy(const ir::Op& op);
  /// Whether every element of `v` is a constant whose bits are all zero (what cp.async fills).
  static bool zero_bits(const ir::Value* v);
  void emit_local_load(const ir::Op& op);
  /// ldmatrix for a local_load where the result layout's lanes take blocks of 8 rows of 16 bytes
  /// as ldmatrix hands them out (a lane the 4 bytes of its row's word: 2 16-bit or 4 8-bit
  /// elements), or 8x8 blocks of 16-bit elements as ldmatrix.trans does; false where they do not.
  bool ldmatrix_load(const ir::Op& op, llvm::Value* tile_base);
  /// The elements a thread reads of `desc`'s tile in one access into `rt`'s layout (1: one by one).
  int64_t shared_vector(const ir::Type& rt, const ir::Type& desc, bool transposed);
  /// The dot a local_load may be done at, where that dot needs its fragments, or null: its one
  /// user, on a matrix unit, later in its block, with nothing between them that waits for copies
  /// or places a buffer (the pipelining pass writes a stage only after an async_wait and a
  /// barrier that follow every read of it). The buffer then lives until that dot.
  static const ir::Op* sunk_to_dot(const ir::Op& op);
  /// Byte offset within a tile of a memdesc's element at (row, col) of the tile as stored.
  llvm::Value* shared_offset(const ir::Type& desc, llvm::Value* row, llvm::Value* col);

  // ---- distributed.cpp: the distributed ops, their code world_ops.h's
  // and the program's threads meeting around what thread 0 does; in a
  // warp-specialized producer, its one thread does it alone
  void emit_distributed(const ir::Op& op);
  /// wait(p, n, v): thread 0 polls (WorldOps::poll_words), then the program's threads meet, so
  /// that their later loads follow the acquire; the last word read reaches every thread through
  /// shared memory. Where the kernel copies by TMA (the async proxy), each thread then fences
  /// the generic proxy's view of global memory, which the acquire ordered, before its copies.
  void emit_wait(const ir::Op& op);
  /// A memcpy to or from a peer's heap as NVSHMEM's call (GpuOptions::nvshmem); false where the
  /// copy is not between this rank and one peer (the threads copy it).
  bool emit_nvshmem_memcpy(const ir::Op& op);
  /// On the NVSHMEM world (GpuOptions::nvshmem), where scalar atomic `op` is a signal NVSHMEM's
  /// atomics carry to a peer (a set of an i32 or i64 word, or an add of an i32 one, that a
  /// symm_at names): that symm_at; else null.
  const ir::Op* nvshmem_signal_peer(const ir::Op& op) const;
  /// The symm_at that defines `v`, a peer's address; null where `v` is defined otherwise.
  static const ir::Op* symm_at_of(const ir::Value* v) {
    return v->def && v->def->code == ir::OpCode::SymmAt ? v->def : nullptr;
  }
  /// A scalar thread 0 computes (`value`, emitted in its branch), made known to every thread
  /// through shared memory; the producer's one thread computes it alone.
  llvm::Value* from_thread0(llvm::Type* t, const std::function<llvm::Value*()>& value);
  /// `v` as thread 0 has it, in every thread (through shared memory, between barriers).
  llvm::Value* to_every_thread(llvm::Value* v);

  // ---- reduce.cpp
  // TMA copies onto mbarriers (tma.cpp)
  void collect_tensor_maps();
  llvm::Value* barrier_at(const ir::Value* bars, llvm::Value* index);
  void emit_init_barrier(const ir::Op& op);
  void emit_async_tma_copy(const ir::Op& op);
  void emit_wait_barrier(const ir::Op& op);
  void emit_arrive_barrier(const ir::Op& op);
  void warp_sync();
  // ---- warp_specialization.cpp
  /// A producer warpgroup after the program's warps (threads threads_ ..), whose first thread
  /// runs region 0 and the others return; the program's warps run region 1, their barriers
  /// named barrier 1 of threads_ threads. setmaxnreg as the op's attributes say.
  void emit_warp_specialize(const ir::Op& op);

  void emit_reduce(const ir::Op& op);

  // ---- dot.cpp
  void emit_dot(const ir::Op& op);
  /// A dot without a matrix unit: both operands staged in shared memory, each thread
  /// accumulating its registers' elements with fused multiply-adds.
  void emit_dot_fma(const ir::Op& op);
  /// A dot whose accumulator is wgmma's (sm_90a): each warpgroup's m64nNk16 over K, A from its
  /// shared view or this thread's dot-operand registers, B from its shared view (K-major, or
  /// N-major read transposed), as one group left in flight (wgmma_wait).
  void emit_dot_wgmma(const ir::Op& op);
  /// An inline asm (convergent) that takes `regs` (f32) in and hands them back, tied, and reads
  /// `more` (constraints `more_cons`, each after a comma): nothing computes with the registers
  /// across it. Returns the registers handed back.
  std::vector<llvm::Value*> through_asm(const std::string& text, const std::vector<llvm::Value*>& regs,
                                        const std::string& more_cons = "", const std::vector<llvm::Value*>& more = {});
  /// wgmma groups in flight: a dot's group is committed, not waited for; its result is the
  /// group's registers until wgmma.wait_group says it is done. `val` waits for a value in
  /// flight (wait_group N, N the groups committed after its own), as do a barrier, a region's
  /// start and end, and the kernel's return (wait_group 0). The wait takes the registers of
  /// every value it completes and hands them back, so nothing reads them before it.
  /// A loop whose dot's result is carried (a GEMM's accumulator) keeps that group in flight
  /// across the back edge and out of the loop: the next iteration's dot of the same instruction
  /// takes it as its accumulator without waiting (wgmma orders its own accumulators), and an
  /// arrive_barrier with `pending` 1 waits for the group before it (wait_group 1).
  void wgmma_wait(int64_t group);
  void wgmma_wait_all() {
    if (!wgmma_pending_.empty()) wgmma_wait(wgmma_groups_ - 1);
  }
  /// Every group in flight completes but `kept`'s, unless a newer one must.
  void wgmma_wait_except(const ir::Value* kept);
  /// Of `loop`'s carried values, the one (its index among them) a wgmma dot of the body yields,
  /// to keep in flight; -1 if none or several.
  int carried_in_flight(const ir::Op& loop) const;
  /// A wgmma dot's instruction shape and types ("m64n256k16.f32.bf16.bf16").
  static std::string wgmma_instr(const ir::Op& dot);
  /// Whether `op` is the one use of `v`, once.
  static bool only_use(const ir::Op& op, const ir::Value* v);
  /// Whether an op after `op` in its block (or nested in one) uses `v`.
  static bool used_after(const ir::Op& op, const ir::Value* v);
  using Bases = std::vector<std::vector<int64_t>>;
  /// Whether A's, B's and C's lanes are a matrix unit's (`a_lanes`, ...) and their warps split
  /// M (A) and N (B) as C's do: each thread holds that unit's fragments.
  static bool fragments(const ir::LinearLayout& la, const ir::LinearLayout& lb, const ir::LinearLayout& lc,
                        const Bases& a_lanes, const Bases& b_lanes, const Bases& c_lanes);
  /// The register of `ll` whose own bits are at (r0, r1); an error naming `op` where none is.
  int64_t fragment_register(const ir::Op& op, const ir::LinearLayout& ll, int64_t r0, int64_t r1);
  /// A dot whose accumulator is MFMA's (AMD): for each S x S tile of this lane's accumulator and
  /// each K step, one MFMA of the lane's 8 bytes of A and B (their dot-operand registers, checked
  /// to hold MFMA's fragments) into its S * S / 64 registers.
  void emit_dot_mfma(const ir::Op& op);
  /// A wgmma matrix descriptor of the tile at shared address `at` (128-byte swizzle).
  llvm::Value* wgmma_desc(llvm::Value* at, int64_t lbo, int64_t sbo);
  /// A tensor stored into a placed buffer in its #shared layout (convert_layout to one).
  void emit_to_shared(const ir::Op& op);
  /// The 32-bit word of registers r .. r + n - 1 of a dot operand of n = 4 / element bytes
  /// elements a word (their memory bits, the first lowest).
  llvm::Value* operand_word(const ir::Value* v, int64_t r);

  // ---- control_flow.cpp
  void emit_for(const ir::Op& op);
  void emit_if(const ir::Op& op);
  void emit_while(const ir::Op& op);
  /// Phis for each scalar and tensor register `vals` carry (from `init`, entering from `from`),
  /// their values as the loop sees them in `out`.
  std::vector<llvm::PHINode*> phis_for(const std::vector<const ir::Value*>& vals, const std::vector<LVal>& init,
                                       llvm::BasicBlock* from, std::vector<LVal>& out);
  /// The end of a loop's body: `term`'s operands are the next values of `phis` (from the
  /// block the builder is in, which is returned), then back to `header`.
  llvm::BasicBlock* close_loop(const ir::Op& term, const std::vector<llvm::PHINode*>& phis, llvm::BasicBlock* header);

  const ir::Function& f_;
  llvm::LLVMContext& ctx_;
  GpuOptions opts_;
  std::unique_ptr<llvm::Module> module_;
  int threads_;
  llvm::GlobalVariable* smem_ = nullptr;
  AxisAnalysis axis_;
  std::map<const ir::Value*, LVal> vals_;
  std::map<std::string, ir::LinearLayout> linear_;                // by type
  std::map<const ir::Op*, std::pair<int64_t, int64_t>> buffers_;  // local_alloc: [offset, end) in shared memory
  std::map<const ir::Op*, int64_t> scratch_floor_;  // ops: where scratch may start (above the live buffers)
  const ir::Op* current_ = nullptr;
  /// The kernel has wgmma dots, which read shared memory through the async proxy: what threads
  /// wrote there (stores, cp.async) is fenced to it before the barrier that publishes it.
  bool wgmma_ = false;
  int64_t smem_bytes_ = 0;
  std::vector<runtime::TmaRecipe> tma_recipes_;  // the kernel's tensor maps, in parameter order
  std::map<std::string, unsigned> tma_maps_;     // a recipe's line: its map
  unsigned first_map_ = 0;                       // the first tensor map's parameter

  // ---- profile.cpp: the profiler's marks
  /// A record of the mark (support/profile_abi.h) by the first thread of the program, or of each
  /// warpgroup in a warp-specialized kernel (the producer's one thread included): the next of
  /// its share, where the share has room.
  void emit_profile(const ir::Op& op);
  /// At the kernel's entry: the marks' count (an alloca), this marker's share and first record.
  void begin_profile();
  llvm::Value* profile_buffer_ = nullptr;     // the ProfileBuffer parameter, where the kernel marks
  llvm::Value* profile_marks_ = nullptr;      // i32: this thread's marks so far
  llvm::Value* profile_share_ = nullptr;      // i32: the records of each marker's share
  llvm::Value* profile_first_ = nullptr;      // i64: this marker's first record
  llvm::Value* profile_program_ = nullptr;    // i32: the program's linear id
  llvm::Value* profile_group_ = nullptr;      // i32: the thread's warpgroup
  llvm::Value* profile_unit_ = nullptr;       // i16: the SM the program runs on
  std::vector<std::string> profile_regions_;  // (ir/profile.h)
  /// The body of the innermost for loop being lowered. A wgmma group's commit in it passes the
  /// float registers of the values the loop carries (its arguments but the induction variable)
  /// through, so that the work on them (attention's softmax of the last iteration's scores) is
  /// scheduled after the group is issued, and runs while it does (dot_prefetch). Only a dot of
  /// the body itself does: in an if or while inside it, the registers handed back would not
  /// dominate the code after that region.
  const ir::Block* loop_body_ = nullptr;
  int producer_threads_ = 0;  // a warp-specialized kernel's producer warpgroup (threads after threads_)
  bool producer_ = false;     // lowering the producer's region: one thread runs it, alone in its warp
  bool consumers_ = false;    // lowering the consumers' region: barriers are theirs only
  int64_t wgmma_groups_ = 0;  // committed so far, in program order
  std::map<const ir::Value*, int64_t> wgmma_pending_;    // dot results in flight: their group
  std::map<const ir::Value*, std::string> wgmma_instr_;  // in flight: the wgmma that made it
  const ir::Value* kept_in_flight_ = nullptr;            // the loop body's yield leaves it in flight
};

}  // namespace tiledist::codegen::gpu_ir
#pragma GCC visibility pop
