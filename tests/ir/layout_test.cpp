// Layouts (ir/layout.h) by their laws: each named layout's linear map agrees with the table it
// stands for (the PTX ISA's mma.m16n8k16/k32 fragments, MFMA's accumulator, Triton's blocked
// layout) at every (register, lane, warp); distributed layouts hold every element once up to
// broadcast; a slice holds, in each thread, the rows its parent holds there; conversions are
// classed by what has to move; text round-trips; bad layouts are errors that say why.
#include "ir/layout.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <stdexcept>

#include "ir/builder.h"
#include "ir/printer.h"

namespace tiledist::ir {
namespace {

using Coords = std::vector<int64_t>;

LayoutRef mma_sync(int64_t wm, int64_t wn) { return Layout::mma_acc(MmaKind::mma_sync, {wm, wn}, {16, 8}); }

/// Every (register, lane, warp) of `ll`, with its coordinates.
template <class F>
void each_input(const LinearLayout& ll, F f) {
  for (int64_t w = 0; w < ll.in_size(LinearLayout::warp); ++w)
    for (int64_t l = 0; l < ll.in_size(LinearLayout::lane); ++l)
      for (int64_t r = 0; r < ll.in_size(LinearLayout::reg); ++r) f(r, l, w, ll.coords(r, l, w));
}

/// How many (register, lane, warp) hold each element; every coordinate in range.
std::map<Coords, int> holders(const LinearLayout& ll) {
  std::map<Coords, int> n;
  each_input(ll, [&](int64_t, int64_t, int64_t, const Coords& c) {
    for (size_t d = 0; d < c.size(); ++d) EXPECT_TRUE(c[d] >= 0 && c[d] < ll.shape[d]);
    n[c]++;
  });
  return n;
}

TEST(Layout, BlockedIsTritonsDefinition) {
  // 4 warps of 4x8 threads, 8 contiguous elements each along dimension 1: a CTA tile of 16x64,
  // repeated 8 times down a 128x64 tensor in registers. Register r is element r % 8 of the
  // thread's run in repetition r / 8; lane l is at row l / 8, columns 8 (l % 8); warp w 4 rows on.
  auto l = Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0});
  LinearLayout ll = to_linear(*l, {128, 64});
  ASSERT_EQ(ll.in_size(LinearLayout::reg), 64);
  each_input(ll, [&](int64_t r, int64_t lane, int64_t w, const Coords& c) {
    Coords want = {(r / 8) * 16 + w * 4 + lane / 8, (lane % 8) * 8 + r % 8};
    EXPECT_EQ(c, want) << "register " << r << " lane " << lane << " warp " << w;
  });
  EXPECT_TRUE(ll.covers_once());
  for (auto& [c, n] : holders(ll)) EXPECT_EQ(n, 1);
}

TEST(Layout, BlockedSmallerThanItsTileBroadcasts) {
  // 128 threads over a 16x16 tensor: each element is held by the same number of threads, once
  // by each, and the repeated lanes and warps are zero bases (broadcast), not registers.
  auto l = Layout::blocked({1, 4}, {8, 4}, {4, 1}, {1, 0});
  LinearLayout ll = to_linear(*l, {16, 16});
  EXPECT_TRUE(ll.covers_once());
  auto n = holders(ll);
  EXPECT_EQ(n.size(), 256u);
  for (auto& [c, k] : n) EXPECT_EQ(k, 2) << "element (" << c[0] << ", " << c[1] << ")";
}

TEST(Layout, TheFirstCopyOfAReplicatedTensorHoldsEachElementOnce) {
  // The inputs whose duplicate bits are clear hold every element exactly once (what a store of
  // a replicated tensor writes from): a 4-element tensor over 16 warps (lanes and warps copies),
  // a tensor smaller than its blocked tile in both dimensions, one larger (registers repeat the
  // tile, no copies), and a slice of a wgmma accumulator (the lanes along the sliced columns).
  struct Case {
    LinearLayout ll;
    std::array<int64_t, 3> dup;
  };
  auto wgmma = Layout::mma_acc(MmaKind::wgmma, {4, 1}, {64, 64});
  const Case cases[] = {
      {to_linear(*Layout::blocked({1}, {32}, {16}, {0}), {4}), {0, 0b11100, 0b1111}},
      {to_linear(*Layout::blocked({1, 4}, {8, 4}, {4, 1}, {1, 0}), {4, 8}), {0, 0b10010, 0b11}},
      {to_linear(*Layout::blocked({1, 4}, {8, 4}, {4, 1}, {1, 0}), {64, 64}), {0, 0, 0}},
      {to_linear(*Layout::slice(1, wgmma), {64}), {0, 0b00011, 0}},
  };
  for (const Case& c : cases) {
    const std::array<int64_t, 3> dup = c.ll.duplicate_bits();
    EXPECT_EQ(dup, c.dup) << c.ll.shape.size() << "-d shape " << c.ll.shape[0];
    std::map<Coords, int> n;
    each_input(c.ll, [&](int64_t r, int64_t lane, int64_t w, const Coords& at) {
      if (!(r & dup[0]) && !(lane & dup[1]) && !(w & dup[2])) n[at]++;
    });
    int64_t numel = 1;
    for (int64_t d : c.ll.shape) numel *= d;
    EXPECT_EQ(static_cast<int64_t>(n.size()), numel);
    for (auto& [at, k] : n) EXPECT_EQ(k, 1) << "element " << at[0];
  }
}

TEST(Layout, MmaSyncAccumulatorIsThePtxFragment) {
  // PTX ISA, mma.m16n8k16 (and k32) accumulator: c0, c1 at row l/4, columns 2(l%4) + {0, 1};
  // c2, c3 eight rows below. Four warps as 2x2 over 64x64: warp w owns rows 32(w/2), columns
  // 32(w%2); its 2x4 tiles of 16x8, row-major, four registers each.
  LinearLayout ll = to_linear(*mma_sync(2, 2), {64, 64});
  ASSERT_EQ(ll.in_size(LinearLayout::reg), 32);
  each_input(ll, [&](int64_t r, int64_t lane, int64_t w, const Coords& c) {
    int64_t tile = r / 4, i = r % 4;
    int64_t row = 32 * (w / 2) + 16 * (tile / 4) + lane / 4 + 8 * (i / 2);
    int64_t col = 32 * (w % 2) + 8 * (tile % 4) + 2 * (lane % 4) + i % 2;
    EXPECT_EQ(c, (Coords{row, col})) << "register " << r << " lane " << lane << " warp " << w;
  });
  EXPECT_TRUE(ll.covers_once());
}

TEST(Layout, WgmmaAccumulatorIsFourWarpsSlicesOfIt) {
  // wgmma m64n128: warp w of the warpgroup holds rows 16w + l/4 (+8), all 128 columns, the
  // registers walking the columns 8 at a time. Two warpgroups over 128 rows.
  auto l = Layout::mma_acc(MmaKind::wgmma, {8, 1}, {64, 128});
  LinearLayout ll = to_linear(*l, {128, 128});
  ASSERT_EQ(ll.in_size(LinearLayout::reg), 64);
  each_input(ll, [&](int64_t r, int64_t lane, int64_t w, const Coords& c) {
    int64_t row = 16 * w + lane / 4 + 8 * ((r % 4) / 2), col = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
    EXPECT_EQ(c, (Coords{row, col}));
  });
  EXPECT_TRUE(ll.covers_once());
}

TEST(Layout, WgmmaAccumulatorOverMoreRowsRepeatsTheInstruction) {
  // One warpgroup over 128 rows: two m64n64 instructions, the second's registers after the
  // first's, warp w holding rows 16w + l/4 (+8) of each 64.
  auto l = Layout::mma_acc(MmaKind::wgmma, {4, 1}, {64, 64});
  LinearLayout ll = to_linear(*l, {128, 64});
  ASSERT_EQ(ll.in_size(LinearLayout::reg), 64);
  each_input(ll, [&](int64_t r, int64_t lane, int64_t w, const Coords& c) {
    const int64_t j = r % 32;  // (the register within its instruction's 32)
    int64_t row = 64 * (r / 32) + 16 * w + lane / 4 + 8 * ((j % 4) / 2), col = 8 * (j / 4) + 2 * (lane % 4) + j % 2;
    EXPECT_EQ(c, (Coords{row, col}));
  });
  EXPECT_TRUE(ll.covers_once());
  // A row slice (what a reduction along the columns makes) repeats the same way.
  LinearLayout rows = to_linear(*Layout::slice(1, l), {128});
  EXPECT_TRUE(rows.in_size(LinearLayout::reg) == 4);
}

TEST(Layout, MmaOperandsAreThePtxFragments) {
  // mma.m16n8k16 A (16-bit): a_i at row l/4 + 8 ((i/2) % 2), column 2(l%4) + i%2 + 8 (i/4).
  auto parent = mma_sync(1, 1);
  LinearLayout a = to_linear(*Layout::dot_operand(0, parent, 2), {16, 16});
  ASSERT_EQ(a.in_size(LinearLayout::reg), 8);
  each_input(a, [&](int64_t i, int64_t l, int64_t, const Coords& c) {
    EXPECT_EQ(c, (Coords{l / 4 + 8 * ((i / 2) % 2), 2 * (l % 4) + i % 2 + 8 * (i / 4)})) << "a" << i << " lane " << l;
  });
  // B (16-bit, K x N): b_i at row 2(l%4) + i%2 + 8 (i/2), column l/4.
  LinearLayout b = to_linear(*Layout::dot_operand(1, parent, 2), {16, 8});
  ASSERT_EQ(b.in_size(LinearLayout::reg), 4);
  each_input(b, [&](int64_t i, int64_t l, int64_t, const Coords& c) {
    EXPECT_EQ(c, (Coords{2 * (l % 4) + i % 2 + 8 * (i / 2), l / 4})) << "b" << i << " lane " << l;
  });
  // mma.m16n8k32 A (8-bit): four bytes per register: a_i at row l/4 + 8 ((i/4) % 2), column
  // 4(l%4) + i%4 + 16 (i/8).
  LinearLayout a8 = to_linear(*Layout::dot_operand(0, parent, 4), {16, 32});
  ASSERT_EQ(a8.in_size(LinearLayout::reg), 16);
  each_input(a8, [&](int64_t i, int64_t l, int64_t, const Coords& c) {
    EXPECT_EQ(c, (Coords{l / 4 + 8 * ((i / 4) % 2), 4 * (l % 4) + i % 4 + 16 * (i / 8)})) << "a" << i << " lane " << l;
  });
  for (auto* ll : {&a, &b, &a8}) EXPECT_TRUE(ll->covers_once());
}

TEST(Layout, OperandsAreSharedByTheWarpsAlongTheOtherDimension) {
  // 2x2 warps: A's rows belong to the warp row (both warps of a row hold them), B's columns to
  // the warp column.
  auto parent = mma_sync(2, 2);
  LinearLayout a = to_linear(*Layout::dot_operand(0, parent, 2), {64, 32});
  auto n = holders(a);
  EXPECT_EQ(n.size(), 64u * 32u);
  for (auto& [c, k] : n) EXPECT_EQ(k, 2);
  for (int64_t w = 0; w < 4; ++w) EXPECT_EQ(a.coords(3, 17, w)[0] / 32, w / 2);
  LinearLayout b = to_linear(*Layout::dot_operand(1, parent, 2), {32, 64});
  for (int64_t w = 0; w < 4; ++w) EXPECT_EQ(b.coords(3, 17, w)[1] / 32, w % 2);
}

TEST(Layout, ABroadcastColumnIsHeldWhereItsRowsAre) {
  // A [M, 1] column in an MMA layout (a row's max, expanded) is in each thread where that row
  // of the [M, N] accumulator is: broadcasting it moves nothing.
  for (LayoutRef l : {mma_sync(4, 1), mma_sync(2, 2), Layout::mma_acc(MmaKind::mfma, {2, 2}, {32, 32})}) {
    LinearLayout full = to_linear(*l, {128, 64}), column = to_linear(*l, {128, 1});
    for (int64_t w = 0; w < full.in_size(LinearLayout::warp); ++w)
      for (int64_t ln = 0; ln < full.in_size(LinearLayout::lane); ++ln) {
        std::set<int64_t> rows, col_rows;
        for (int64_t r = 0; r < full.in_size(LinearLayout::reg); ++r) rows.insert(full.coords(r, ln, w)[0]);
        for (int64_t r = 0; r < column.in_size(LinearLayout::reg); ++r) col_rows.insert(column.coords(r, ln, w)[0]);
        ASSERT_EQ(rows, col_rows) << l->str() << " lane " << ln << " warp " << w;
      }
  }
}

TEST(Layout, MfmaAccumulatorIsTheCdnaTable) {
  // 32x32: register r of lane l at row 8 (r/4) + 4 (l/32) + r%4, column l%32; 16x16: row
  // 4 (l/16) + r, column l%16 (what codegen's MFMA lowering computes).
  for (int64_t side : {32, 16}) {
    LinearLayout ll = to_linear(*Layout::mma_acc(MmaKind::mfma, {1, 1}, {side, side}), {side, side});
    ASSERT_EQ(ll.in_size(LinearLayout::reg), side * side / 64);
    each_input(ll, [&](int64_t r, int64_t l, int64_t, const Coords& c) {
      EXPECT_EQ(c, (Coords{4 * (64 / side) * (r / 4) + 4 * (l / side) + r % 4, l % side}))
          << side << ": r" << r << " lane " << l;
    });
    EXPECT_TRUE(ll.covers_once());
  }
}

TEST(Layout, EveryDistributedLayoutHoldsEachElementOnce) {
  struct Case {
    LayoutRef l;
    Coords shape;
  };
  auto wg = Layout::mma_acc(MmaKind::wgmma, {4, 1}, {64, 64});
  auto mfma = Layout::mma_acc(MmaKind::mfma, {2, 2}, {32, 32});
  std::vector<Case> cases = {
      {Layout::blocked({4}, {32}, {4}, {0}), {1024}},
      {Layout::blocked({2, 2}, {8, 4}, {2, 2}, {0, 1}), {64, 32}},
      {Layout::blocked({1, 1, 4}, {2, 4, 4}, {1, 2, 2}, {2, 1, 0}), {4, 16, 64}},
      {mma_sync(4, 1), {128, 64}},
      {wg, {64, 256}},
      {mfma, {128, 64}},
      {Layout::dot_operand(0, wg, 2), {64, 64}},
      {Layout::dot_operand(0, mfma, 4), {128, 64}},
      {Layout::dot_operand(1, mfma, 8), {64, 128}},
  };
  for (auto& c : cases) EXPECT_TRUE(to_linear(*c.l, c.shape).covers_once()) << c.l->str();
}

TEST(Layout, SliceHoldsTheRowsItsParentHoldsInEachThread) {
  // A reduction along dimension 1 leaves each thread the rows it summed: for every lane and
  // warp, the slice's elements are the parent's rows there.
  for (LayoutRef parent : {mma_sync(4, 1), mma_sync(2, 2), Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0}),
                           Layout::mma_acc(MmaKind::mfma, {4, 1}, {32, 32})}) {
    for (int dim : {0, 1}) {
      Coords shape = {128, 64};
      LinearLayout p = to_linear(*parent, shape);
      Coords kept = {shape[1 - dim]};
      LinearLayout s = to_linear(*Layout::slice(dim, parent), kept);
      EXPECT_TRUE(s.covers_once()) << parent->str() << " dim " << dim;
      for (int64_t w = 0; w < p.in_size(LinearLayout::warp); ++w)
        for (int64_t l = 0; l < p.in_size(LinearLayout::lane); ++l) {
          std::set<int64_t> from_parent, from_slice;
          for (int64_t r = 0; r < p.in_size(LinearLayout::reg); ++r) from_parent.insert(p.coords(r, l, w)[1 - dim]);
          for (int64_t r = 0; r < s.in_size(LinearLayout::reg); ++r) from_slice.insert(s.coords(r, l, w)[0]);
          ASSERT_EQ(from_parent, from_slice) << parent->str() << " dim " << dim << " lane " << l << " warp " << w;
        }
    }
  }
}

TEST(Layout, SharedSwizzleIsABijectionWithoutBankConflicts) {
  // 64x64 bf16, rows of 128 bytes in 16-byte chunks XOR-swizzled by row: any 8 consecutive rows
  // put a given column chunk in 8 different chunks (ldmatrix reads 8 rows' chunk at once).
  auto l = Layout::shared(8, 1, 8, {1, 0});
  LinearLayout ll = to_linear(*l, {64, 64});
  EXPECT_TRUE(ll.covers_once());
  std::map<Coords, int64_t> offset_of;
  for (int64_t o = 0; o < 64 * 64; ++o) offset_of[ll.apply({o})] = o;
  ASSERT_EQ(offset_of.size(), 4096u);
  for (int64_t row0 = 0; row0 < 64; row0 += 8)
    for (int64_t chunk = 0; chunk < 8; ++chunk) {
      std::set<int64_t> physical;
      for (int64_t r = row0; r < row0 + 8; ++r) physical.insert(offset_of[{r, chunk * 8}] % 64 / 8);
      EXPECT_EQ(physical.size(), 8u) << "rows " << row0 << "..+8, chunk " << chunk;
    }
  EXPECT_THROW(to_linear(*Layout::shared(8, 1, 8, {1, 0}), {64, 32}), std::invalid_argument);
}

TEST(Layout, SharedColumnBlocksHoldWgmmaAtoms) {
  // 64x128 bf16 in column blocks of 64 (wgmma's 128-byte swizzle atoms): offset o holds
  // element (row, col) with col = (o / (64 * 64)) * 64 + the swizzled position within the row.
  auto l = Layout::shared(8, 1, 8, {1, 0}, 64);
  LinearLayout ll = to_linear(*l, {64, 128});
  EXPECT_TRUE(ll.covers_once());
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 128; ++c) {
      const int64_t o = (c / 64) * 64 * 64 + r * 64 + ((c % 64 / 8) ^ (r % 8)) * 8 + c % 8;
      ASSERT_EQ(ll.apply({o}), (Coords{r, c})) << "offset " << o;
    }
  // Seen transposed (a K tile read as Kᵀ), the same bytes.
  LinearLayout t = to_linear(*l->transposed(), {128, 64});
  for (int64_t o = 0; o < 64 * 128; o += 37) {
    Coords c = ll.apply({o}), ct = t.apply({o});
    EXPECT_EQ(ct, (Coords{c[1], c[0]})) << "offset " << o;
  }
  // A block narrower than a swizzle's span is refused; the text carries the block.
  EXPECT_THROW(Layout::shared(8, 1, 8, {1, 0}, 32), std::invalid_argument);
  std::string text = l->str();
  EXPECT_NE(text.find("block = 64"), std::string::npos) << text;
  size_t pos = 0;
  EXPECT_TRUE(same_layout(l, parse_layout(text, pos)));
  EXPECT_FALSE(same_layout(l, Layout::shared(8, 1, 8, {1, 0})));
}

TEST(Layout, ConversionsAreClassedByWhatMoves) {
  // FlashAttention-2's P: with warps along M only, the first dot's accumulator, cast to 16
  // bits, is the second dot's A operand as it stands: the same registers of the same threads
  // (mma.sync's and wgmma's alike). With 8-bit operands (4 along K per thread) it is not, but
  // stays within each warp. Anything from a blocked layout to an MMA's goes through shared
  // memory, and so does P where the warps split its columns.
  auto acc = mma_sync(4, 1);
  EXPECT_EQ(convert_cost(*acc, *Layout::dot_operand(0, acc, 2), {128, 64}), ConvertCost::none);
  EXPECT_EQ(convert_cost(*acc, *Layout::dot_operand(0, acc, 4), {128, 64}), ConvertCost::warp_shuffle);
  auto wg = Layout::mma_acc(MmaKind::wgmma, {4, 1}, {64, 128});
  EXPECT_EQ(convert_cost(*wg, *Layout::dot_operand(0, wg, 2), {64, 128}), ConvertCost::none);
  auto split = mma_sync(2, 2);
  EXPECT_EQ(convert_cost(*split, *Layout::dot_operand(0, split, 2), {64, 64}), ConvertCost::shared_memory);
  auto blocked = Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0});
  EXPECT_EQ(convert_cost(*blocked, *acc, {128, 64}), ConvertCost::shared_memory);
  EXPECT_EQ(convert_cost(*acc, *mma_sync(4, 1), {128, 64}), ConvertCost::none);
  // The same elements in each thread, in another register order: a renaming.
  auto rows_first = Layout::blocked({2, 2}, {1, 32}, {4, 1}, {1, 0}),
       cols_first = Layout::blocked({2, 2}, {1, 32}, {4, 1}, {0, 1});
  EXPECT_EQ(convert_cost(*rows_first, *cols_first, {8, 64}), ConvertCost::registers);
  // Lanes that walk another dimension first: the elements stay in the warp.
  auto x = Layout::blocked({2, 2}, {4, 8}, {4, 1}, {1, 0}), y = Layout::blocked({2, 2}, {4, 8}, {4, 1}, {0, 1});
  EXPECT_EQ(convert_cost(*x, *y, {32, 32}), ConvertCost::warp_shuffle);
  // Warps that split rows and warps that split columns: through shared memory.
  auto by_cols = Layout::blocked({2, 2}, {4, 8}, {1, 4}, {1, 0});
  EXPECT_EQ(convert_cost(*x, *by_cols, {32, 64}), ConvertCost::shared_memory);
  EXPECT_EQ(convert_cost(*Layout::slice(1, acc), *Layout::slice(1, acc), {128}), ConvertCost::none);
}

TEST(Layout, VectorsAreTheRegistersThatRunAlongADimension) {
  EXPECT_EQ(contiguous_registers(to_linear(*Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0}), {64, 64}), 1), 8);
  EXPECT_EQ(contiguous_registers(to_linear(*Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0}), {64, 64}), 0), 1);
  EXPECT_EQ(contiguous_registers(to_linear(*mma_sync(2, 2), {64, 64}), 1), 2);  // c0, c1: a pair of columns
  EXPECT_EQ(contiguous_registers(to_linear(*Layout::dot_operand(0, mma_sync(4, 1), 4), {64, 64}), 1), 4);
  EXPECT_EQ(contiguous_registers(to_linear(*Layout::mma_acc(MmaKind::mfma, {1, 1}, {32, 32}), {32, 32}), 0), 4);
}

/// Runs `plan` on `x` laid out by `ll` as the lowering would (each thread's registers combined,
/// then XOR shuffles between lanes, then a sum over warps) and checks every thread's result
/// registers against the sums along `dim` at the coordinates the slice layout gives them.
void check_reduction(const LayoutRef& l, const Coords& shape, int dim) {
  LinearLayout ll = to_linear(*l, shape);
  ReducePlan plan = reduce_plan(ll, dim);
  ASSERT_FALSE(plan.mixed);
  const int64_t lanes = ll.in_size(LinearLayout::lane), warps = ll.in_size(LinearLayout::warp);
  auto x = [&](const Coords& c) { return static_cast<double>((c[0] * 131 + c[1] * 7) % 97); };
  // threads' partial sums: [warp][lane][result register]
  std::vector<std::vector<std::vector<double>>> part(warps, std::vector<std::vector<double>>(lanes));
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t ln = 0; ln < lanes; ++ln)
      for (const auto& group : plan.groups) {
        double sum = 0;
        for (int64_t r : group) sum += x(ll.coords(r, ln, w));
        part[w][ln].push_back(sum);
      }
  for (int64_t m : plan.lane_xor) {
    auto next = part;
    for (int64_t w = 0; w < warps; ++w)
      for (int64_t ln = 0; ln < lanes; ++ln)
        for (size_t j = 0; j < part[w][ln].size(); ++j) next[w][ln][j] += part[w][ln ^ m][j];
    part = next;
  }
  for (int bit : plan.warp_bits) {
    auto next = part;
    for (int64_t w = 0; w < warps; ++w)
      for (int64_t ln = 0; ln < lanes; ++ln)
        for (size_t j = 0; j < part[w][ln].size(); ++j) next[w][ln][j] += part[w ^ (int64_t{1} << bit)][ln][j];
    part = next;
  }
  Coords kept = {shape[1 - dim]};
  LinearLayout s = to_linear(*Layout::slice(dim, l), kept);
  ASSERT_EQ(static_cast<int64_t>(plan.groups.size()), s.in_size(LinearLayout::reg)) << l->str();
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t ln = 0; ln < lanes; ++ln)
      for (int64_t j = 0; j < s.in_size(LinearLayout::reg); ++j) {
        int64_t at = s.coords(j, ln, w)[0];
        double want = 0;
        for (int64_t i = 0; i < shape[dim]; ++i) want += x(dim == 0 ? Coords{i, at} : Coords{at, i});
        ASSERT_EQ(part[w][ln][j], want) << l->str() << " dim " << dim << " warp " << w << " lane " << ln << " register "
                                        << j;
      }
}

TEST(Layout, ReductionPlansSumEachRowOnce) {
  for (LayoutRef l : {mma_sync(4, 1), mma_sync(2, 2), Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0}),
                      Layout::blocked({2, 1}, {8, 4}, {1, 4}, {0, 1}), Layout::mma_acc(MmaKind::mfma, {2, 2}, {32, 32}),
                      Layout::mma_acc(MmaKind::wgmma, {4, 1}, {64, 64})})
    for (int dim : {0, 1}) {
      check_reduction(l, {128, 64}, dim);
      check_reduction(l, {16, 16}, dim);  // smaller than the layout's tile: lanes and warps hold copies
    }
}

TEST(Layout, RegisterPermutationsRenameOnly) {
  auto rows_first = Layout::blocked({2, 2}, {1, 32}, {4, 1}, {1, 0}),
       cols_first = Layout::blocked({2, 2}, {1, 32}, {4, 1}, {0, 1});
  LinearLayout a = to_linear(*rows_first, {8, 64}), b = to_linear(*cols_first, {8, 64});
  auto perm = register_permutation(a, b);
  ASSERT_TRUE(perm.has_value());
  for (int64_t w = 0; w < 4; ++w)
    for (int64_t l = 0; l < 32; ++l)
      for (int64_t j = 0; j < b.in_size(LinearLayout::reg); ++j)
        EXPECT_EQ(b.coords(j, l, w), a.coords((*perm)[j], l, w));
  // mma.sync's accumulator and its A operand: the same registers, in order.
  auto acc = mma_sync(4, 1);
  auto same = register_permutation(to_linear(*acc, {128, 64}), to_linear(*Layout::dot_operand(0, acc, 2), {128, 64}));
  ASSERT_TRUE(same.has_value());
  for (size_t j = 0; j < same->size(); ++j) EXPECT_EQ((*same)[j], static_cast<int64_t>(j));
  EXPECT_FALSE(register_permutation(to_linear(*acc, {128, 64}),
                                    to_linear(*Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0}), {128, 64})));
}

TEST(Layout, TextRoundTrips) {
  auto acc = Layout::mma_acc(MmaKind::wgmma, {8, 1}, {64, 256});
  for (LayoutRef l : {Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 0}), acc, Layout::dot_operand(0, acc, 2),
                      Layout::slice(1, Layout::dot_operand(1, mma_sync(2, 2), 4)), Layout::shared(8, 2, 4, {0, 1}),
                      Layout::mma_acc(MmaKind::mfma, {2, 2}, {16, 16})}) {
    std::string text = l->str();
    size_t pos = 0;
    LayoutRef back = parse_layout(text, pos);
    EXPECT_EQ(pos, text.size());
    EXPECT_TRUE(same_layout(l, back)) << text << " came back as " << back->str();
  }
  std::string f = R"(func @f(%a: f32) {
  %0 = splat %a : tensor<64x64xf32, #mma<mma_sync, wpc = [4, 1], instr = [16, 8]>>
  %1 = reduce %0 {axis = 1, kind = "max"} : tensor<64xf32, #slice<dim = 1, #mma<mma_sync, wpc = [4, 1], instr = [16, 8]>>>
  %2 = convert_layout %0 : tensor<64x64xf32, #blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>>
  return
}
)";
  EXPECT_EQ(print(*parse_function(f, "f")), f);
}

void expect_error(const std::function<void()>& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << want;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(Layout, BadLayoutsSayWhy) {
  expect_error([] { Layout::blocked({1, 8}, {4, 4}, {4, 1}, {1, 0}); }, "makes 16 lanes, not 32 or 64");
  expect_error([] { Layout::blocked({1, 8}, {4, 8}, {4, 1}, {1, 1}); }, "is not a permutation");
  expect_error([] { Layout::blocked({1, 3}, {4, 8}, {4, 1}, {1, 0}); }, "must be a power of two");
  expect_error([] { Layout::mma_acc(MmaKind::wgmma, {2, 2}, {64, 64}); }, "whole warpgroups");
  expect_error([] { Layout::dot_operand(0, Layout::blocked({1}, {32}, {4}, {0}), 2); }, "must be an mma layout");
  expect_error([] { to_linear(*mma_sync(4, 1), {64, 48}); }, "power-of-two shapes");
  expect_error([] { parse_function("func @f(%a: f32) {\n %0 = splat %a : tensor<4xf32, #tiled<>>\n return\n}", "t"); },
               "t:2:32: parse error: unknown layout '#tiled'");
}

TEST(Verifier, ChecksLayouts) {
  const std::string mma = "#mma<mma_sync, wpc = [4, 1], instr = [16, 8]>";
  const std::string blocked = "#blocked<spt = [1, 4], tpw = [2, 16], wpc = [4, 1], order = [1, 0]>";
  auto rejected = [](const std::string& body, const std::string& want) {
    expect_error([&] { parse_function("func @f(%a: f32) {\n" + body + " return\n}", "t"); }, want);
  };
  rejected(" %0 = splat %a : tensor<64x64xf32, " + mma + ">\n %1 = splat %a : tensor<64x64xf32, " + blocked +
               ">\n %2 = add %0, %1 : tensor<64x64xf32, " + mma + ">\n",
           "op 'add' at <unknown>: its tensors' layouts differ: #mma<mma_sync");
  rejected(" %0 = splat %a : tensor<64x64xf32, " + mma + ">\n %1 = exp %0 : tensor<64x64xf32>\n",
           "some of its tensors have a layout and others none");
  rejected(" %0 = splat %a : tensor<64x64xf32, " + mma +
               ">\n %1 = reduce %0 {axis = 1, kind = \"sum\"} : tensor<64xf32, #slice<dim = 0, " + mma + ">>\n",
           "the result's layout must be #slice<dim = 1");
  rejected(" %0 = splat %a : tensor<64x64xf32, " + mma + ">\n %1 = dot %0, %0, %0 : tensor<64x64xf32, " + mma + ">\n",
           "operand 0 must be a dot operand of");
  rejected(" %0 = splat %a : tensor<48x64xf32, " + mma + ">\n", "a layout maps power-of-two shapes, not [48, 64]");
  rejected(" %0 = splat %a : tensor<64x64xf32>\n %1 = convert_layout %0 : tensor<64x64xf32, " + mma + ">\n",
           "converts a tensor with a layout");
}

TEST(Verifier, ChecksSharedMemoryOps) {
  const std::string sh = "#shared<vec = 8, per_phase = 1, max_phase = 8, order = [1, 0]>";
  const std::string bl = "#blocked<spt = [1, 8], tpw = [4, 8], wpc = [4, 1], order = [1, 0]>";
  const std::string buf = " %b = local_alloc : memdesc<2x64x64xbf16, " + sh + ">\n";
  auto rejected = [](const std::string& body, const std::string& want) {
    expect_error([&] { parse_function("func @f(%p: ptr<bf16>, %i: i32) {\n" + body + " return\n}", "t"); }, want);
  };
  rejected(" %b = local_alloc : memdesc<2x64x64xbf16, " + bl + ">\n",
           "a memdesc holds tiles of numbers in a #shared layout");
  rejected(buf + " %x = local_load %b, %i : tensor<32x64xbf16, " + bl + ">\n",
           "op 'local_load' at <unknown>: result must be tensor<64x64xbf16>");
  rejected(buf + " %x = local_load %b, %i {perm = [1, 1]} : tensor<64x64xbf16, " + bl + ">\n",
           "perm is [0, 1] or [1, 0]");
  rejected(buf + " %q = splat %p : tensor<64x32xptr<bf16>, " + bl + ">\n async_copy %b, %i, %q {via = \"cp.async\"}\n",
           "ptrs must be a [64, 64] tensor of pointers to bf16");
  rejected(buf + " %q = splat %p : tensor<64x64xptr<bf16>, " + bl + ">\n async_copy %b, %i, %q {via = \"dma\"}\n",
           "attribute via = \"dma\" is not one of the allowed values");
  rejected(" async_wait {pending = -1}\n", "needs an integer 'pending' >= 0");
  const std::string bars =
      " %m = local_alloc : memdesc<2x1x1xi64, #shared<vec = 1, per_phase = 1, max_phase = 1, order = [1, 0]>>\n";
  rejected(bars + " arrive_barrier %m, %i, %i\n", "pred must be i1, got i32");
  rejected(bars + " %t = constant {value = 1} : i1\n arrive_barrier %m, %i, %t {pending = -1}\n",
           "'pending' must be an integer >= 0");
  rejected(bars + " arrive_barrier %m\n", "takes (barriers, index[, pred])");
  rejected(buf + " %x = local_load %b, %b : tensor<64x64xbf16, " + bl + ">\n", "operand 1 is a memdesc");
  rejected(buf + " %x = local_load %b, %p : tensor<64x64xbf16, " + bl + ">\n", "the tile index must be i32");
  rejected(buf + " %y = exp %b : memdesc<2x64x64xbf16, " + sh + ">\n",
           "operand 0 is a memdesc: only the shared-memory and barrier ops take one");
  expect_error(
      [] {
        parse_function(
            "func @f(%a: f32) {\n %0 = splat %a : tensor<4xf32, #shared<vec = 99999999999999999999, "
            "per_phase = 1, max_phase = 1, order = [1, 0]>>\n return\n}",
            "t");
      },
      "is too large for a layout");
}

}  // namespace
}  // namespace tiledist::ir
