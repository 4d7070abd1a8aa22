// The GPU lowering, shared by NVPTX and AMDGCN (codegen/gpu_target.h: what each target gives).
// A program instance is one CTA (workgroup) of `num_warps` warps (wavefronts) of threads. A block
// tensor of N elements is spread cyclically over the threads: element e (in row-major order)
// lives in thread e % T, slot e / T, so consecutive threads touch consecutive addresses
// (coalesced). Elementwise ops stay in registers; ops that move elements between threads
// (broadcast, transpose, reductions, dot) go through dynamic shared memory between two
// barriers. Scalars are uniform: every thread computes them, and side effects on scalars are
// done by thread 0. On NVIDIA tensor cores, dot's accumulator has an MMA layout of its own
// (mma.sync, wgmma), and pipelined dot loops copy their tiles ahead (cp.async, TMA).
//
// This header is private to codegen/gpu/: the class GpuLowering, its state and its members'
// declarations. The members are defined by concern in the files beside it: lowering.cpp (the
// kernel's entry, values, the dispatch of ops), layout.cpp (the cyclic layout, shared-memory
// staging), elementwise.cpp (Elements' hooks: bf16, f8), recompute.cpp (values recomputed at any
// element or iteration; broadcast, transpose), memory.cpp (loads, stores, memcpy, atomics),
// distributed.cpp (symm_at, wait, the device barrier, failing), reduce.cpp, mma_layout.cpp (the
// MMA accumulator layout and arithmetic in it), pipeline.cpp (pipelined dot loops, cp.async),
// tma.cpp (TMA operands and mbarriers, sm_90a), warp_specialization.cpp, dot.cpp (staging, FMA),
// dot_nvidia.cpp (mma.sync, ldmatrix, wgmma), dot_mfma.cpp (AMD's MFMA), control_flow.cpp (for,
// if, while).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "codegen/axis_info.h"
#include "codegen/codegen.h"
#include "codegen/elements.h"
#include "codegen/gpu_target.h"
#include "codegen/world_ops.h"
#include "llvm/IR/LLVMContext.h"
#include "support/device_world.h"

// Private to codegen: its members are not part of libtiledist.so's interface.
#pragma GCC visibility push(hidden)
namespace tiledist::codegen::gpu {

/// A value in generated code: a uniform scalar, or this thread's slots of a tensor.
struct GVal {
  llvm::Value* scalar = nullptr;
  std::vector<llvm::Value*> slots;
  /// Slots in the MMA accumulator layout instead of the cyclic one: slot 4*i + r is register r
  /// of the warp's i-th 16x8 tile (see tile_of). Only dot produces it and only loops carry it;
  /// every other use sees the value converted to the cyclic layout.
  bool mma = false;
};

class GpuLowering : public WorldOps {
 public:
  GpuLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make);

  GpuModule run();
  void without_warp_specialization() { ws_allowed_ = false; }
  bool warp_specialized() const { return ws_.has_value(); }
  /// Threads per program: the layouts' threads_, and a producer warpgroup where warp specialized.
  int block_threads() const { return threads_ + (ws_ ? 128 : 0); }

 private:
  GpuLowering(const ir::Function& f, llvm::LLVMContext& ctx, const GpuOptions& opts, MakeGpuTarget make,
              std::unique_ptr<llvm::Module> m);

  [[noreturn]] void unsupported(const ir::Op& op, const std::string& what);

  // ---- lowering.cpp: the values as lowered, the dispatch of ops, and small emission helpers
  /// The value as lowered, in whatever layout it has.
  GVal& raw(const ir::Value* v);
  /// The value in the cyclic layout (converted once per consuming op, see emit()).
  GVal& val(const ir::Value* v);
  llvm::Value* element(const ir::Value* v, int64_t j);
  void define(const ir::Op& op, GVal g) { vals_[op.results[0].get()] = std::move(g); }
  void emit_block(const ir::Block& block);
  void emit(const ir::Op& op);
  void emit_op(const ir::Op& op);
  /// Inline PTX (NVIDIA's tensor-core paths) that keeps its place among loads, stores and barriers.
  llvm::Value* ptx(llvm::Type* ret, const std::string& text, std::string constraints,
                   const std::vector<llvm::Value*>& args);
  /// An instruction with no operands that keeps its place (fences, commits, waits).
  void ptx_void(const std::string& text) { ptx(b_.getVoidTy(), text, "", {}); }

  // ---- layout.cpp: the cyclic layout (element index of slot j of this thread, and validity),
  // and shared memory staging
  /// Consecutive elements per thread: max_vec_ (16-byte accesses: 4 f32, or 8 bf16 where the
  /// kernel's tensor memory is all 16-bit or narrower), or down to 2, where every thread gets
  /// whole vectors of them, else 1. A function of the element count only (within a kernel), so
  /// that every operand of an elementwise op has the same layout.
  int64_t vec_of(const ir::Type& t) const;

  /// Whether every tensor the kernel loads or stores has elements of at most 2 bytes (and there
  /// is at least one).
  static bool narrow_memory(const ir::Function& f);
  int64_t slots_of(const ir::Type& t) const { return (t.numel() + threads_ - 1) / threads_; }

  /// The widest vector access for a load or store of `t` at `ptr` under `mask`: a power of two
  /// up to vec_of(t) whose runs the axis analysis proves contiguous, aligned and masked as a
  /// whole (the slots of a layout vector are contiguous, so are its halves); 1 for none.
  int64_t vector_width(const ir::Type& t, const ir::Value* ptr, const ir::Value* mask);
  /// Slot j of this thread holds element (j / V) * V * T + tid * V + j % V.
  llvm::Value* element_index(const ir::Type& t, int64_t j);
  /// Whether slot j holds an element (the last slot may not, in every thread).
  llvm::Value* valid(const ir::Type& t, int64_t j);
  static std::vector<int64_t> strides_of(const std::vector<int64_t>& shape);
  std::vector<llvm::Value*> multi_index(llvm::Value* e, const std::vector<int64_t>& shape);
  llvm::Value* linear(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& strides);

  /// `bytes` of dynamic shared memory at offset `base` of the scratch area, which starts above
  /// whatever a pipelined loop being lowered keeps there (its operand buffers).
  llvm::Value* scratch(int64_t base, int64_t bytes);

  /// The program's threads meet: all of them, or where warp specialized the consumers (named
  /// barrier 1; the producer warpgroup never takes part).
  void barrier();
  llvm::Type* buf_type(const ir::Type& t) { return !t.is_ptr && t.dtype == DType::i1 ? b_.getInt8Ty() : reg_type(t); }
  int64_t elem_bytes(const ir::Type& t);
  /// Stages a tensor in shared memory at byte offset `base`; returns the staged array.
  llvm::Value* stage(const ir::Value* v, int64_t base);
  llvm::Value* staged_load(llvm::Value* arr, const ir::Type& t, llvm::Value* index);
  /// A scalar computed by thread 0 only (a side effect), made known to every thread.
  llvm::Value* from_thread0(llvm::Type* t, const std::function<llvm::Value*()>& value);

  // ---- elementwise.cpp: Elements' hooks
  llvm::Value* math(OpCode code, llvm::Value* x) override { return target_->math(code, x); }
  llvm::Value* bf16_bits(llvm::Value* v) override;
  llvm::Value* f8_from_bits(llvm::Value* bits, DType d) override { return target_->f8_from_bits(bits, d); }
  llvm::Value* f8_to_bits(llvm::Value* v, DType d) override { return target_->f8_to_bits(v, d); }

  // ---- recompute.cpp: values recomputed at any element or iteration; broadcast and transpose
  /// Input strides of a broadcast or transpose: element (i0, i1, ...) of the result reads the
  /// input at sum(i_d * strides[d]).
  std::vector<int64_t> permute_strides(const ir::Op& op);

  /// Whether the elements of `v` can be recomputed at any index from aranges, splats and
  /// elementwise ops (index arithmetic, masks), rather than read from the thread that holds them.
  bool recomputable(const ir::Value* v, int budget = 24);

  /// The element of `v` at row-major index `e` (an i32), recomputed (see recomputable). While a
  /// pipelined loop prefetches, scalars of its body are recomputed for a later iteration.
  llvm::Value* recompute(const ir::Value* v, llvm::Value* e);
  /// A loop-carried value that advances by `inc` per iteration, at the iteration prefetched.
  llvm::Value* advanced(const ir::Value* v, llvm::Value* init, llvm::Value* inc);
  llvm::Value* recompute_scalar(const ir::Value* v);

  /// Whether `v` can be recomputed for any iteration of the loop whose body is `body`: tensors
  /// as in recomputable(), scalars of the body from its induction variable and outer values.
  bool loop_recomputable(const ir::Value* v, const ir::Block& body, int budget = 32);

  /// Broadcast and transpose: index arithmetic is recomputed where it is needed; other values
  /// go through shared memory.
  void emit_permute(const ir::Op& op);

  // ---- mma_layout.cpp: the MMA accumulator layout, and arithmetic in it
  // An accumulator's epilogue (acc + a tile loaded from memory, acc * a scale) is done where
  // the accumulator is: each thread on its own fragment elements, loading its own elements of
  // the other tile (in pairs of adjacent columns where they are aligned), rather than through
  // shared memory into the cyclic layout.
  /// How the 16x8 tiles of an MMA accumulator are shared by the warps: where the warps can
  /// form a grid of WM x WN warp tiles of wtm x wtn elements (wtn a multiple of 16), warp w owns
  /// the warp tile (w / WN, w % WN) and its tiles in row-major order (operand fragments are
  /// reused across a warp tile); otherwise warp w takes the tiles w, w + W, ...
  /// On AMD GPUs the tiles are MFMA's (GpuTarget::mfma_tile: 32x32 or 16x16, a wavefront's 64
  /// lanes holding 16 or 4 registers each), wavefront w taking the tiles w, w + W, ...
  struct MmaTiles {
    int64_t M, N, tiles_n, tiles, per_warp;
    int64_t warps_n = 0, wtm = 0, wtn = 0;  // the warp grid, when warps_n > 0
    int64_t tile = 0;                       // MFMA: the tile's side (0: mma.sync's 16x8)
    int regs = 4;                           // registers per tile and thread
  };

  MmaTiles mma_tiles(const ir::Type& t) const;
  /// Tensor cores take bf16/f16 (m16n8k16, sm_80+) and f8 (m16n8k32, sm_89+: our sm_90a).
  bool mma_eligible(const ir::Op& dot) const;

  /// K of one MFMA of tile side `side`: a lane's 8 bytes of operand times the 64 / side lanes
  /// that share a row (32x32x8 and 16x16x16 for 16-bit operands, 32x32x16 and 16x16x32 for f8).
  static int64_t mfma_k(int64_t side, DType d) { return 8 / ir::dtype_bytes(d) * (64 / side); }
  llvm::Value* warp_id() { return b_.CreateUDiv(tid_, b_.getInt32(target_->warp_size())); }
  /// Tile t's register r: its row-major element index; `tile_ok` whether this warp has tile i.
  llvm::Value* mma_index(const MmaTiles& m, llvm::Value* t, int r);

  /// MFMA's accumulator: in a tile of side S, register r of lane l holds row
  /// 4 (64 / S) (r / 4) + 4 (l / S) + r % 4 and column l % S.
  llvm::Value* mfma_index(const MmaTiles& m, llvm::Value* t, int r);
  llvm::Value* tile_of(const MmaTiles& m, int64_t i);
  llvm::Value* tile_ok(const MmaTiles& m, int64_t i);
  GVal cyclic_from_mma(const GVal& g, const ir::Type& t);
  GVal mma_from(const ir::Value* v);

  /// Whether `def` (a loop body's) will be done in the MMA layout given its `carried` operand in
  /// it: arithmetic whose other operands are recomputable or loads that can be left to it.
  bool updates_in_mma(const ir::Op& def, const ir::Value* carried);
  /// Whether `to` follows `from` in its block with only pure, regionless ops between them.
  static bool only_pure_between(const ir::Op& from, const ir::Op& to);

  /// Elementwise float arithmetic that can be done in the MMA layout (whose slots are f32
  /// registers, as every float but f64 is).
  static bool mma_arithmetic(const ir::Op& op);

  /// Whether `op` is done in the MMA layout: arithmetic with one use and an operand in it, every
  /// other operand in it too, recomputable at any element, or a load left to `op` (`pending`, or one
  /// already in mma_loads_).
  bool in_mma_layout(const ir::Op& op, const ir::Op* pending = nullptr);
  /// Whether `v` is (or, not lowered yet, will be) in the MMA layout.
  bool mma_made(const ir::Value* v, const ir::Op* pending);

  /// Whether load `op` is left to its one user, done in the MMA layout. Only pure ops may lie
  /// between them: the load must not move past a store, a wait or a barrier.
  bool loads_into_mma(const ir::Op& op);
  /// The elements e and e + 1 of `load`, loaded by this thread (`ok`: whether it holds them).
  std::array<llvm::Value*, 2> load_pair(const ir::Op& load, llvm::Value* e, llvm::Value* ok);
  void emit_in_mma_layout(const ir::Op& op);

  // ---- memory.cpp: loads, stores (an MMA accumulator's from its own layout), memcpy, atomics
  void emit_load(const ir::Op& op);

  /// A store of an MMA accumulator whose addresses and mask can be recomputed anywhere: each
  /// thread stores its own fragment elements, two adjacent ones at a time where aligned.
  bool stores_from_mma(const ir::Op& op);
  void emit_store_from_mma(const ir::Op& op);
  void emit_store(const ir::Op& op);

  /// memcpy by the program's threads: 16 bytes at a time where both ends and the size allow,
  /// else bytewise; the threads meet before (the source is written) and after (the copy is
  /// done before whatever the program does next, a signal included).
  void emit_memcpy(const ir::Op& op);
  void emit_atomic(const ir::Op& op);

  // ---- distributed.cpp: distributed ops (their code shared with the GPU IR lowering:
  // codegen/world_ops.h), the program's threads meeting around what thread 0 does
  /// symm_at(p, r): p's offset in this rank's heap, added to rank r's heap as mapped here.
  void emit_symm_at(const ir::Op& op);
  /// wait(p, n, v): thread 0 polls (WorldOps::poll_words); the program's threads meet after it,
  /// so their later loads follow the acquire. The result is the last word read.
  void emit_wait(const ir::Op& op);
  /// A barrier of every program on every rank: WorldOps::device_barrier_by_thread0 between two
  /// of the program's barriers.
  void emit_device_barrier();

  // ---- reduce.cpp: reductions
  /// A whole 1-D tensor reduced to a scalar (softmax, layernorm): each thread combines its
  /// slots, warps combine through butterfly shuffles, and warps through shared memory.
  bool emit_reduce_to_scalar(const ir::Op& op);
  /// Reductions: stage the operand; each output element is reduced by the thread that owns it.
  void emit_reduce(const ir::Op& op);

  // ---- pipeline.cpp: pipelined dot loops
  // A loop whose carried accumulator is `dot(load(A), load(B), acc)` keeps its operand tiles in
  // `stages` shared-memory buffers filled by cp.async, `stages - 1` iterations ahead of the
  // tensor cores, which read them with ldmatrix. Tiles are stored row by row in 16-byte chunks,
  // swizzled so that the eight rows an ldmatrix reads fall in different banks.
  struct PipeOperand {
    const ir::Op* load;
    int64_t rows, cols, offset;  // offset: within a stage buffer
    /// Where the tile is not known to be 16-byte aligned and contiguous in memory (the generic
    /// variant): element loads into registers at the start of an iteration, stored to shared
    /// memory before its barrier, instead of cp.async.
    bool staged = false;
    bool contiguous = false;  // staged: the elements of a chunk are adjacent in memory
    bool chunk_mask = false;  // staged: one mask value holds for the elements of a chunk
    /// Stored transposed ([cols][rows]): f8 B tiles, whose fragments need K-adjacent bytes that
    /// ldmatrix cannot transpose (staged only).
    bool transposed = false;
    bool vector_rows = false;  // transposed: its rows can be read 16 bytes at a time
    /// wgmma operands: the tile in column blocks of 128 bytes, each block's rows contiguous
    /// (128-byte swizzle atoms of 8 rows; see blocked_swizzled).
    bool blocked = false;
    /// B given as trans(load of B^T): the tile loaded is [N][K], stored like A (K-major), and
    /// wgmma reads it untransposed (the only form f8 wgmma takes). wgmma pipelines only.
    const ir::Op* trans = nullptr;  // the trans op, which the pipeline does instead
    bool k_major() const { return trans != nullptr; }
    int64_t esize = 2;  // bytes per element: 2 (f16, bf16) or 1 (f8)
    /// Copied by TMA (Pipeline::tma): tensor map `map` (tma_recipes_), one box per 128 bytes of
    /// a row; tile element (i, j) is the tensor's (row0 + i, col0 + j), where for the iteration
    /// copied row0 = row_start + row_offset and col0 = col_start + col_offset (a null start: 0).
    int map = -1;
    const ir::Value* row_start = nullptr;
    const ir::Value* col_start = nullptr;
    int64_t row_offset = 0, col_offset = 0;
    const ir::Value* base = nullptr;                  // TMA: the base pointer (through the waits that order the copies)
    int64_t per_chunk() const { return 16 / esize; }  // elements per 16-byte chunk
    int64_t row_bytes() const { return (transposed ? rows : cols) * esize; }
    int64_t bytes() const { return rows * cols * esize; }
  };

  /// A chunk loaded into registers, waiting for its store to shared memory: four words, or for
  /// a transposed tile a word per column of its block.
  struct StagedChunk {
    llvm::Value* ok;
    llvm::Value* dst;
    llvm::Value* words[4];
    std::vector<std::pair<llvm::Value*, llvm::Value*>> stores;  // transposed: (address, word)
  };

  struct Pipeline {
    const ir::Op* loop;
    const ir::Op* dot;
    PipeOperand a, b;
    int stages;
    int64_t stage_bytes;
    /// sm_90a: the dot is wgmma.mma_async of each warpgroup (m64 x the tile's N) reading both
    /// tiles from shared memory; the loop prefetches `stages - 2` ahead, so that a stage is
    /// rewritten only after the wgmma groups that read it have completed (wait_group 1).
    bool wgmma = false;
    /// wgmma pipelines whose tiles TMA copies: one thread issues a stage's copies, which complete
    /// on the stage's mbarrier (at `bars`, 8 bytes per stage) that the others wait on.
    bool tma = false;
    int64_t bars = 0;
    /// Warp specialized (see WarpSpec): the producer warpgroup issues the copies; consumers wait
    /// on the `full` mbarriers (at `bars`) and arrive on the `empty` ones once a stage is read.
    bool ws = false;
    llvm::Value* iteration = nullptr;  // the current iteration of this run of the loop, from 0
    /// How many iterations the loop's copies run ahead of its dot.
    int ahead() const { return wgmma ? stages - 2 : stages - 1; }
    int64_t base = 0;                         // of the first buffer in dynamic shared memory
    llvm::Value* read_stage = nullptr;        // the stage the current iteration's dot reads
    llvm::Value* next_stage = nullptr;        // the next iteration's
    std::vector<llvm::Value*> frags{};        // the current iteration's first fragments (loop-carried)
    std::vector<llvm::Value*> next_frags{};   // the next iteration's, once the dot has loaded them
    std::vector<StagedChunk> in_registers{};  // staged operands' chunks not yet in shared memory
  };

  static bool is_zero(const ir::Value* v);

  /// Whether `block` (or a region in it) writes memory: then loads of later iterations may not
  /// be moved ahead of it.
  static bool writes_memory(const ir::Block& block);
  std::optional<Pipeline> match_pipeline(const ir::Op& loop);
  static constexpr int64_t kPipelineSmemBytes = 160 * 1024;  // of the 227 KB a CTA may have
  static constexpr int64_t kWgmmaSmemBytes = 208 * 1024;

  /// wgmma.mma_async takes the pipeline's dot on sm_90a where both tiles come whole by cp.async
  /// or TMA (16-bit, or f8 with B K-major), each warpgroup's share of the tile is m64 x N (M =
  /// 16 x warps: the accumulator layout of mma_tiles, one warp per 16 rows), N is a multiple of
  /// 64 up to 256 and K a multiple of 128 bytes (the 128-byte swizzle of the descriptors).
  bool wgmma_eligible(const Pipeline& p) const;

  /// The shapes of the dots that wgmma pipelines make: mma_tiles gives them the wgmma layout,
  /// decided before lowering so that every value of the shape agrees.
  void find_wgmma_loops();

  /// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows stored in
  /// column blocks of 128 bytes (block after block, each `rows` x 128 bytes), with the 128-byte
  /// swizzle of wgmma descriptors and TMA: the chunk index XOR the row within its 8-row atom.
  llvm::Value* blocked_swizzled(llvm::Value* row, llvm::Value* chunk, int64_t rows);

  /// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile with rows of
  /// `row_bytes`: within each 128-byte line the chunk index is XORed with the row (rows of 128
  /// bytes or more) or with the line (shorter rows, several to a line).
  llvm::Value* swizzled(llvm::Value* row, llvm::Value* chunk, int64_t row_bytes);
  llvm::Value* stage_base(const Pipeline& p, llvm::Value* stage);
  /// Stores the staged operands' chunks loaded by the last pipe_issue into shared memory.
  void pipe_store_staged(Pipeline& p);

  /// A transposed (f8) tile through registers: each thread takes blocks of 4 rows x 16 columns,
  /// reads the rows (16 bytes at once where the analysis allows), and makes one 32-bit word per
  /// column of the 4 bytes that sit together in the transposed tile.
  void issue_transposed(Pipeline& p, const PipeOperand& o, llvm::Value* base, llvm::Value* live);

  /// Starts the copies of iteration `j`'s operand tiles into buffer `stage` (zeros where masked
  /// off or past the end of the loop) and commits them as one group; staged operands are loaded
  /// into registers, for pipe_store_staged.
  void pipe_issue(Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* hi, llvm::Value* j,
                  llvm::Value* stage);

  /// Iteration `j`'s induction variable, set for recompute() of the loop body's values for that
  /// iteration until end_prefetch.
  llvm::Value* prefetch_iteration(const Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* j);
  void end_prefetch();

  /// cp.async.cg of 16 bytes (`size` of them read, the rest zero-filled) to a shared address.
  /// Inline assembly: LLVM 19 selects the intrinsic only where shared and global addresses have
  /// the same width, and ours are 32 and 64 bits. It clobbers memory, so that loads and stores
  /// keep their order around it.
  void cp_async_16(llvm::Value* dst, llvm::Value* src, llvm::Value* size);

  // ---- tma.cpp: TMA operands, and TMA copies completing on mbarriers (sm_90a)
  static const ir::Value* through(const ir::Value* v, std::initializer_list<OpCode> codes);

  /// A 2-D integer tensor that counts along one axis: v[i][j] = start + offset + (i or j).
  struct TileIndex {
    const ir::Value* start = nullptr;  // a scalar, or null for 0
    int64_t offset = 0;
    int axis = 0;
    bool operator==(const TileIndex&) const = default;
  };

  static std::optional<TileIndex> tile_index(const ir::Value* v);

  /// A size the host knows at launch: a runtime parameter (through hints and widening casts:
  /// the launch reads the parameter's value) or a positive constant.
  std::optional<runtime::TmaRecipe::Dim> host_size(const ir::Value* v) const;

  struct TmaMatch {
    PipeOperand op;
    runtime::TmaRecipe recipe;
  };

  /// Whether TMA can copy the operand's tiles: its address is `base + row * stride + col` and
  /// its mask `row < rows & col < cols` (in any order and grouping), where the base pointer is a
  /// 16-byte aligned parameter, stride, rows and cols parameters or constants (the row stride a
  /// multiple of 16 bytes), and row and col count up from scalars that are never negative along
  /// the tile's two axes. TMA reads zeros where the mask is off, as the load would give (and
  /// for negative coordinates too, where the load would read memory: hence the last rule).
  std::optional<TmaMatch> tma_operand(const PipeOperand& o);
  llvm::Value* shared_u32(llvm::Value* p) { return b_.CreatePtrToInt(p, b_.getInt32Ty()); }
  llvm::Value* stage_bar(const Pipeline& p, llvm::Value* stage);
  void mbar_init(llvm::Value* bar, int count);
  /// Arrives on `bar`, which then also waits for `bytes` of asynchronous copies.
  void mbar_expect(llvm::Value* bar, int64_t bytes);

  /// Waits for phase `parity` of the mbarrier at `bar`: one try_wait, then a spin under a
  /// timeout, twice the world's (a wait upstream of the pipeline, for a signal, then gives up
  /// first and names its signal) or, in kernels without a world, kPipelineTimeoutNs. A pipeline
  /// stuck that long is a bug to report, not a hang.
  void mbar_wait(llvm::Value* bar, llvm::Value* parity);

  /// Thread 0 starts the TMA copies of iteration `j`'s tiles into buffer `stage` (none past the
  /// end of the loop); they complete on the stage's mbarrier, which expects their bytes.
  void tma_issue(Pipeline& p, llvm::Value* iv0, llvm::Value* step, llvm::Value* hi, llvm::Value* j, llvm::Value* stage);

  /// The copies of the iteration being prefetched (prefetch_iteration) into buffer `stage`,
  /// whose mbarrier this thread arrives on, expecting their bytes.
  void tma_copy(Pipeline& p, llvm::Value* stage);

  // ---- warp_specialization.cpp: warp specialization (sm_90a, GpuOptions::warp_specialize)
  // The program gets a producer warpgroup after its `threads_` consumer threads. One producer
  // thread runs the kernel's producer slice: the scalar ops, waits and control flow that the
  // copies of the TMA loop need (see plan_warp_specialization), and for each iteration of each
  // run of the loop, waits until its next buffer is free (the buffer's `empty` mbarrier) and
  // issues the iteration's copies into it (completing on its `full` mbarrier). The buffers and
  // mbarriers stay put for the whole kernel, and the producer and the consumers count the same
  // iterations (stage and parity in locals), so the producer runs ahead across runs of the
  // loop: a persistent kernel's next tile loads under this tile's epilogue. The consumers wait
  // on `full`, and every consumer thread arrives on `empty` once the wgmma group that read the
  // buffer has completed (wait_group 1 in the next iteration, wait_group 0 after the loop); no
  // barrier in the loop. Their other barriers are named barrier 1, of the consumers only.
  struct WarpSpec {
    const ir::Op* loop = nullptr;
    std::set<const ir::Op*> ops;    // the producer's: the slice, the control flow around it, the loop
    std::set<const ir::Op*> loops;  // of those, loops whose carried values the producer computes too
    int stages = 0;
    int64_t stage_bytes = 0, base = 0, full = 0, empty = 0, end = 0;
    llvm::Value* stage = nullptr;  // locals: the next iteration's buffer and its parity
    llvm::Value* phase = nullptr;
  };

  llvm::Value* next_of(llvm::Value* s, int stages);
  /// The parity of the stage after `next_stage`'s predecessor: it flips where the stages wrap.
  llvm::Value* next_phase(llvm::Value* next_stage, llvm::Value* phase);
  llvm::Value* prev_of(llvm::Value* s, int stages);
  llvm::Value* empty_bar(llvm::Value* stage);
  /// This thread arrives on buffer `stage`'s empty mbarrier if `cond` (no branch: predicated).
  void empty_arrive(llvm::Value* stage, llvm::Value* cond);
  /// Whether `v` takes its value from a wait's result (a token passed on by consume_token does not).
  bool from_wait(const ir::Value* v, int depth = 0);

  /// Warp specialization for the kernel's TMA loop `loop` where the producer can compute what
  /// its copies need: the loop's bounds, the scalars the copies' coordinates are recomputed
  /// from, the base pointers (through the waits their tokens carry), and the conditions and
  /// bounds of the control flow around all of these, each made only of scalar ops that move
  /// no data (pure ops, waits, symm_at) and of loops carrying scalars. The producer and the
  /// consumers must count the same iterations: no bound, coordinate or condition may come from
  /// a wait's result (each side reads its own; a wait orders the copies through its token
  /// only). The copies must not need ordering after anything the consumers do first: nothing
  /// before the loop (in it and around it) writes memory or orders it but the producer's own
  /// waits. (What the kernel writes after the loop, a persistent kernel's epilogue, is assumed
  /// not to be what the loop's next run reads, as for any GEMM whose output is not its input.)
  /// Sets ws_ and reserves the buffers and mbarriers at the start of shared memory.
  void plan_warp_specialization(const ir::Op& loop, const PipeOperand& a, const PipeOperand& b);

  /// The waits of the producer slice that only order its copies: their results reach nothing
  /// but the pointers of the TMA loop's A and B loads (through loops carrying them,
  /// consume_token and pure ops). The consumers skip them: their tiles come through the full
  /// mbarriers, after the producer's own wait (ag_gemm's signal waits: a spin and three
  /// barriers per tile less on the consumers' side).
  void find_producer_only_waits(const PipeOperand& a, const PipeOperand& b);

  /// Kernel entry, warp specialized: thread 0 sets up the mbarriers, everyone meets, and the
  /// producer warpgroup gives registers to the consumers (setmaxnreg, with two consumer
  /// warpgroups: 40 and 232 a thread, as CUTLASS's kernels of 384 threads), runs the producer
  /// slice on one thread and returns. The consumers go on to the kernel's body.
  void emit_warp_specialized_entry();
  void emit_producer_block(const ir::Block& block);
  /// A loop around the producer's work, or one whose carried scalars it needs.
  void producer_for(const ir::Op& op);
  /// A condition around the producer's work (its results are the consumers' only).
  void producer_if(const ir::Op& op);

  /// The TMA loop, on the producer's side: per iteration, wait until the next buffer is free,
  /// then copy the iteration's tiles into it.
  void producer_loop(const ir::Op& loop);

  // ---- dot.cpp: dot's staging and its FMA path
  /// Stages a 2-D 16- or 8-bit float tensor in shared memory in its memory format (what MMA
  /// consumes), transposed if asked, with each stored row padded by 8 elements so that the 8
  /// rows a fragment load touches fall in different banks. Returns the array; its row length
  /// is `padded_row(...)`.
  static int64_t padded_row(int64_t n) { return n + 8; }
  llvm::Value* stage_narrow(const ir::Value* v, int64_t base, bool transpose,
                            const std::function<llvm::Value*(llvm::Value*)>& bits = nullptr);
  /// dot: both operands staged; each thread accumulates its output elements with FMAs.
  void emit_dot(const ir::Op& op);

  // ---- dot_nvidia.cpp: mma.sync (ldmatrix fragments) and wgmma
  static const char* ptx_type(DType d);
  /// One mma.sync: m16n8k16 for 16-bit inputs, m16n8k32 for f8.
  llvm::Value* mma_sync(DType da, DType db, llvm::Value* const a[4], llvm::Value* b0, llvm::Value* b1,
                        llvm::Value* const acc[4]);

  /// This warp's A and B fragments for columns [16 ks, 16 ks + 16) of K from a stage buffer:
  /// ldmatrix.x4 per 16 rows of A (its four 8x8 blocks), ldmatrix.x4.trans per 16 columns of B
  /// (two n8 tiles). A's come first, four registers each, then B's.
  std::vector<llvm::Value*> pipe_fragments(const Pipeline& p, const MmaTiles& m, llvm::Value* stage, int64_t ks);

  /// Waits for the next iteration's tiles, and (once every thread is past this iteration's
  /// reads) loads its first fragments, which the loop carries.
  void pipe_advance(Pipeline& p, const MmaTiles& m, llvm::Value* next_stage);

  /// A wgmma matrix descriptor for the tile at shared address `at`: 128-byte swizzle, `lbo` and
  /// `sbo` the byte strides between column blocks and between 8-row atoms (PTX ISA, "Matrix
  /// Descriptor Format").
  llvm::Value* wgmma_desc(llvm::Value* at, int64_t lbo, int64_t sbo);

  /// Inline PTX that reads and writes the f32 registers of `acc` in place ($0.. are outputs, the
  /// inputs tied to them), with `more` operands after them (constraints `more_cons`, each with
  /// its leading comma).
  void ptx_on_acc(GVal& acc, const std::string& text, const std::string& more_cons,
                  const std::vector<llvm::Value*>& more);

  /// wgmma.wait_group with the accumulator passed through it, so that nothing reads the
  /// registers before the wgmma that writes them has completed.
  void wgmma_wait(GVal& acc, int pending) {
    ptx_on_acc(acc, str_cat("wgmma.wait_group.sync.aligned ", pending, ";"), "", {});
  }

  /// The dot of a wgmma pipeline: each warpgroup issues K/16 wgmma.m64nNk16 on its 64 rows of
  /// A and all of B (both from the stage buffer through descriptors), chained on the
  /// accumulator, commits them as a group, and waits until the previous iteration's group has
  /// completed (this one stays in flight through the next iteration's barrier and prefetch).
  void pipe_dot_wgmma(Pipeline& p, const ir::Op& op);

  /// The dot of a pipelined loop. Fragments of the first 16 columns of K come from the previous
  /// iteration; the others are loaded up front; before the last mma.sync step the warp waits for
  /// the next tiles and loads the next iteration's first fragments, so that the barrier and the
  /// loads overlap tensor-core work.
  void pipe_dot(Pipeline& p, const ir::Op& op);

  /// dot on tensor cores outside pipelined loops (see mma_eligible; f32 accumulator): A and B
  /// are staged in shared memory (B transposed), each warp walks its 16x8 output tiles issuing
  /// mma.sync.m16n8k16 (m16n8k32 for f8) over K; the result stays in the MMA layout.
  bool emit_dot_mma(const ir::Op& op);

  // ---- dot_mfma.cpp: MFMA
  /// dot on AMD's matrix cores (see mma_tiles): A and B are staged in LDS in the bits MFMA takes
  /// (GpuTarget::mfma_operand; B transposed), each wavefront walks its tiles issuing an MFMA per
  /// K step; lane l's operands are 8 bytes of row (column) l % S of A (B), the (l / S)-th 8 bytes
  /// of the step's K. The result stays in the MFMA layout.
  bool emit_dot_mfma(const ir::Op& op);

  // ---- control_flow.cpp: scalars are uniform, so branches are taken by the whole CTA.
  /// Phis in `header` for every scalar and every slot of the carried values.
  std::vector<GVal> carried_phis(const std::vector<ir::Type>& types, const std::vector<GVal>& init,
                                 llvm::BasicBlock* header, llvm::BasicBlock* pre);
  void close_phis(const std::vector<GVal>& phis, const std::vector<GVal>& next, llvm::BasicBlock* latch);
  std::vector<GVal> values_of(const ir::Op& term, size_t skip);

  /// A loop's blocks: the header, with the induction variable and the carried values as phis,
  /// the body and the exit. open_loop branches from where the builder is to the header and
  /// leaves the builder there (for phis of the caller's own); enter_body tests iv < hi and
  /// moves to the body; close_loop, at the body's end (the latch), steps iv, takes the next
  /// carried values (`more(latch)`: the caller's phis), goes back and moves to the exit.
  struct LoopBlocks {
    llvm::BasicBlock* pre;
    llvm::BasicBlock* header;
    llvm::BasicBlock* body;
    llvm::BasicBlock* exit;
    llvm::PHINode* iv;
    std::vector<GVal> carried;
  };

  LoopBlocks open_loop(const std::string& name, llvm::Value* lo, const std::vector<ir::Type>& types,
                       const std::vector<GVal>& init);
  void enter_body(const LoopBlocks& l, llvm::Value* hi);
  void close_loop(const LoopBlocks& l, llvm::Value* step, const std::vector<GVal>& next,
                  const std::function<void(llvm::BasicBlock*)>& more = {});
  void emit_for(const ir::Op& op);
  void emit_if(const ir::Op& op);
  void emit_while(const ir::Op& op);

  const ir::Function& f_;
  llvm::LLVMContext& ctx_;
  GpuOptions opts_;
  std::unique_ptr<llvm::Module> module_;
  int threads_;
  llvm::GlobalVariable* smem_ = nullptr;
  int64_t max_vec_ = 4;  // vec_of's widest vector (8 for kernels of 16-bit memory)
  int64_t smem_bytes_ = 0;
  int64_t smem_floor_ = 0;  // scratch() starts here
  AxisAnalysis axis_;
  std::map<const ir::Op*, Pipeline*> pipe_dots_;        // dots of the pipelined loops being lowered
  std::set<std::pair<int64_t, int64_t>> wgmma_shapes_;  // see find_wgmma_loops
  std::vector<runtime::TmaRecipe> tma_recipes_;         // the kernel's tensor maps, in parameter order
  std::map<const ir::Op*, std::pair<PipeOperand, PipeOperand>> tma_loops_;  // wgmma loops copying by TMA
  unsigned first_map_ = 0;                                                  // the first tensor map's parameter
  std::optional<WarpSpec> ws_;                                              // warp specialized (see WarpSpec)
  bool ws_allowed_ = true;  // (false: lowered again without, see lower_nvptx)
  std::map<const ir::Value*, bool> from_wait_;
  bool producer_ = false;                           // emitting the producer's code
  std::set<const ir::Op*> producer_only_waits_;     // see find_producer_only_waits
  std::set<const ir::Op*> mma_loads_;               // loads that their user does in the MMA layout
  std::set<const ir::Op*> deferred_loads_;          // loads (and B's trans) that pipelines do instead
  std::map<const ir::Value*, llvm::Value*> subst_;  // recompute(): values for the iteration prefetched
  const ir::Block* subst_body_ = nullptr;           // recompute(): the body whose scalars are recomputed
  llvm::Value* subst_iteration_ = nullptr;          // recompute(): the iteration (from 0) prefetched
  std::map<const ir::Value*, GVal> vals_;
  std::map<const ir::Value*, GVal> converted_;  // MMA values seen in the cyclic layout by this op
};

}  // namespace tiledist::codegen::gpu
#pragma GCC visibility pop
