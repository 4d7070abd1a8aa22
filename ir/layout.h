// Layouts of block tensors on GPU targets: which thread of which warp holds each element, in
// which of its registers (distributed layouts), or where in shared memory it lies (shared
// layouts). A layout is an attribute of a tensor type (`tensor<64x64xf32, #mma<...>>`), as in
// Triton's TritonGPU dialect; a change of layout is an explicit `convert_layout` op. The CPU
// backend never sees them.
//
// Each named layout (blocked, MMA accumulator, dot operand, slice, shared) is a presentation of
// a *linear layout* (layout.h's LinearLayout): for power-of-two shapes, a map over GF(2) from the
// bits of (register, lane, warp) — or of a shared-memory offset — to the bits of each tensor
// coordinate. Every question a pass asks of layouts (which thread holds an element, whether a
// conversion stays in registers, within a warp, or needs shared memory) is answered on that one
// algebra, so that no pass knows the fragment tables of mma.sync, wgmma or MFMA but this file.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tiledist::ir {

/// The matrix instruction an MMA accumulator layout is the result of. mma_sync and wgmma share
/// the fragment of a 16x8 tile (lane l holds rows l/4 and l/4 + 8, columns 2(l%4) + {0, 1});
/// wgmma's m64nN is four warps' 16-row slices of it. MFMA's tile is 32x32 or 16x16 over 64 lanes.
enum class MmaKind : uint8_t { mma_sync, wgmma, mfma };
const char* mma_kind_name(MmaKind k);

struct Layout;
using LayoutRef = std::shared_ptr<const Layout>;

/// A layout, by kind. Built by the static makers, which check their arguments (a bad layout is
/// reported with what was wrong: `Error` from make_*, or the parser's message).
struct Layout {
  enum class Kind : uint8_t { blocked, mma, dot_operand, slice, shared };
  Kind kind = Kind::blocked;

  // blocked: each thread holds size_per_thread contiguous elements per dimension, a warp's
  // threads_per_warp and the CTA's warps_per_cta tile the tensor, dimensions listed in `order`
  // fastest first (Triton's #blocked). Repeated over registers where the tensor is larger,
  // replicated over threads where it is smaller.
  std::vector<int64_t> size_per_thread, threads_per_warp, warps_per_cta, order;
  // mma: the accumulator of `mma` instructions of shape instr_shape (M x N); warps_per_cta is
  // the warp grid; each warp owns a contiguous (M / wm) x (N / wn) warp tile, its instruction
  // tiles in row-major order in its registers.
  MmaKind mma = MmaKind::mma_sync;
  std::vector<int64_t> instr_shape;
  // dot_operand: operand `op_index` (0: A, M x K; 1: B, K x N) of a dot whose result has layout
  // `parent` (an mma), held in registers: k_width elements contiguous along K per register group
  // (2 for 16-bit operands of mma.sync, 4 for 8-bit; 8 bytes' worth for MFMA).
  int op_index = 0;
  int k_width = 0;
  // slice: `parent` with dimension `dim` removed (what a reduction along `dim` makes, and what
  // expand_dims along `dim` takes back to the parent).
  int dim = 0;
  LayoutRef parent;
  // shared: rows of `order[0]`-contiguous elements in shared memory, 16-byte chunks (`vec`
  // elements) XOR-swizzled: chunk c of row r goes to c ^ ((r / per_phase) % max_phase). With
  // `block` (0: none), rows are cut into blocks of that many elements, stored one column block
  // after another (every row's first `block` elements, then every row's next ones), each
  // swizzled as above: wgmma's descriptors read 128-byte rows in 8-row atoms.
  int vec = 1, per_phase = 1, max_phase = 1;
  int64_t block = 0;

  static LayoutRef blocked(std::vector<int64_t> size_per_thread, std::vector<int64_t> threads_per_warp,
                           std::vector<int64_t> warps_per_cta, std::vector<int64_t> order);
  static LayoutRef mma_acc(MmaKind kind, std::vector<int64_t> warps_per_cta, std::vector<int64_t> instr_shape);
  static LayoutRef dot_operand(int op_index, LayoutRef parent, int k_width);
  static LayoutRef slice(int dim, LayoutRef parent);
  static LayoutRef shared(int vec, int per_phase, int max_phase, std::vector<int64_t> order, int64_t block = 0);
  /// The shared layout with its order reversed (the same bytes seen transposed).
  LayoutRef transposed() const;

  /// The tensor rank the layout describes (a slice: its parent's less one).
  int rank() const;
  bool is_distributed() const { return kind != Kind::shared; }
  /// Warps per CTA the layout spreads over (a distributed layout), and lanes per warp.
  int64_t num_warps() const;
  int64_t warp_size() const;

  /// `#blocked<...>`, `#mma<...>`, ...: what the printer writes and the parser reads back.
  std::string str() const;
  bool operator==(const Layout& o) const;
};

bool same_layout(const LayoutRef& a, const LayoutRef& b);

/// Parses what Layout::str writes, from `text` at `pos` (advanced past it). Throws
/// std::invalid_argument with what was wrong (the IR parser adds the position).
LayoutRef parse_layout(const std::string& text, size_t& pos);

/// A linear layout: for each input dimension (register, lane, warp for a distributed layout; the
/// element offset for a shared one), one basis per bit: the tensor coordinates that bit moves to.
/// The coordinates of an input are the XOR of the bases of its set bits. Shapes are powers of
/// two. A zero basis of a lane or warp means those threads hold the same elements (broadcast).
struct LinearLayout {
  enum In : int { reg = 0, lane = 1, warp = 2, offset = 0 };
  std::vector<int64_t> shape;                            // the tensor's
  std::vector<std::vector<std::vector<int64_t>>> bases;  // [in][bit] -> coordinates

  int64_t in_size(int in) const { return int64_t{1} << bases.at(in).size(); }
  std::vector<int64_t> apply(const std::vector<int64_t>& inputs) const;
  /// The tensor's coordinates held by (register, lane, warp).
  std::vector<int64_t> coords(int64_t r, int64_t l, int64_t w) const { return apply({r, l, w}); }
  /// Whether every element is held by exactly one (register, lane, warp) once lanes and warps
  /// that are broadcast (zero bases) are set aside: no register holds a duplicate, and the
  /// bases span the tensor.
  bool covers_once() const;
  /// Per input (reg, lane, warp), the bits that repeat what the bits before them hold (zero
  /// bases, and bases in the span of earlier ones): the inputs with those bits clear hold each
  /// element once (where a store writes a replicated tensor from only one of its copies).
  std::array<int64_t, 3> duplicate_bits() const;
  bool operator==(const LinearLayout&) const = default;
};

/// The linear layout of `layout` for a tensor of `shape` (powers of two), with `warp_size`
/// lanes. Throws std::invalid_argument where the shape does not fit the layout (an MMA tile
/// larger than the tensor, a rank that differs).
LinearLayout to_linear(const Layout& layout, const std::vector<int64_t>& shape);

/// What a convert_layout from `from` to `to` costs on a tensor of `shape`, cheapest first:
/// nothing (the same map), a renaming of each thread's registers (every thread already holds
/// the elements it needs: an MMA accumulator becoming the next dot's A operand, FlashAttention-2's
/// P), shuffles within each warp, or a round trip through shared memory.
enum class ConvertCost : uint8_t { none, registers, warp_shuffle, shared_memory };
const char* convert_cost_name(ConvertCost c);
ConvertCost convert_cost(const Layout& from, const Layout& to, const std::vector<int64_t>& shape);

/// What a lowering needs of a distributed layout, read off its linear map.

/// How many consecutive registers, from register 0, hold consecutive elements of `dim` (and
/// so may be loaded or stored as one vector where memory is contiguous along `dim`).
int64_t contiguous_registers(const LinearLayout& ll, int dim);

/// A reduction along `dim`: each thread first combines, for each of its result registers (the
/// slice layout's), the registers `groups[j]` that differ only along `dim`; then lanes combine by
/// XOR shuffles over `lane_xor` (the lane bits that move along `dim`; lanes that hold copies are
/// left out, or their copies would be counted twice); then warps over `warp_bits` through shared
/// memory. Empty where the layout mixes `dim` with other dimensions in one basis (none of the
/// named layouts does): `mixed` says so.
struct ReducePlan {
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> lane_xor;
  std::vector<int> warp_bits;
  bool mixed = false;
};
ReducePlan reduce_plan(const LinearLayout& ll, int dim);

/// Where a conversion that stays in each thread's registers takes each register from: `to`'s
/// register j is `from`'s register perm[j], in every thread. Null where lanes or warps differ
/// between the two maps (the conversion moves data between threads) or a register of `to` is
/// not held under `from`.
std::optional<std::vector<int64_t>> register_permutation(const LinearLayout& from, const LinearLayout& to);

}  // namespace tiledist::ir
