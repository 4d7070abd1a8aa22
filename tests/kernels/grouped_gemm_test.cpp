// kernels::GroupedGemm (MoE grouped GEMM) on the default target, against a per-expert matmul in
// double on the host (with the f8 scales applied there, to the f8 values the kernel reads),
// every element checked; and kernels written the way a README reader would write them
// (the expert found by searching offs, an epilogue reading another tensor, carried pointers),
// checked against the same reference. Fresh random inputs each run (the seed is printed on
// failure). On the CPU the shapes are small, with small tiles so that every case of the tile
// table shows up; where the default target is a GPU, larger shapes on the library's tiles too.
#include "kernels/grouped_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernels/reference.h"
#include "tests/jit/error_of.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using kernels::GroupedGemm;
using test_util::error_of;
using tl::Tensor;
using tl::Values;

bool on_gpu() { return Target::default_target().kind == Target::Kind::nvptx; }

// ---- the reference

/// Cumulative end rows of experts of these sizes.
std::vector<int32_t> offsets_of(const std::vector<int>& sizes) {
  std::vector<int32_t> offs(sizes.size());
  std::partial_sum(sizes.begin(), sizes.end(), offs.begin());
  return offs;
}

/// A problem's inputs as the kernel sees them (rounded to its dtype), in float.
struct Problem {
  int rows = 0, N = 0, K = 0, E = 0;
  std::vector<int32_t> offs;
  bool nk = true;  // W [E, N, K] (else [E, K, N])
  std::vector<float> a, w;
  std::vector<float> scale_a, scale_w;  // f8 only: rowwise [rows], [E, N]; blockwise [rows, KB], [E, NB, KB]
  bool blockwise = false;
  float w_at(int e, int k, int n) const { return nk ? w[(size_t(e) * N + n) * K + k] : w[(size_t(e) * K + k) * N + n]; }
  int kb() const { return (K + 127) / 128; }
  int nb() const { return (N + 127) / 128; }
};

/// C in double, per expert: want (rows past the last offset NaN: not to be written) and, for
/// each element, the sum of the magnitudes of its terms (for the bound on f32's rounding).
void reference(const Problem& p, std::vector<double>& want, std::vector<double>& magnitude) {
  want.assign(size_t(p.rows) * p.N, NAN);
  magnitude.assign(want.size(), 0);
  for (int e = 0, start = 0; e < p.E; start = p.offs[e], ++e)
    for (int r = start; r < p.offs[e]; ++r)
      for (int n = 0; n < p.N; ++n) {
        double sum = 0, mag = 0;
        for (int k = 0; k < p.K; ++k) {
          double term = double(p.a[size_t(r) * p.K + k]) * p.w_at(e, k, n);
          if (p.blockwise)
            term *= double(p.scale_a[size_t(r) * p.kb() + k / 128]) *
                    p.scale_w[(size_t(e) * p.nb() + n / 128) * p.kb() + k / 128];
          sum += term, mag += std::abs(term);
        }
        if (!p.scale_a.empty() && !p.blockwise) {
          const double s = double(p.scale_a[r]) * p.scale_w[size_t(e) * p.N + n];
          sum *= s, mag *= s;
        }
        want[size_t(r) * p.N + n] = sum, magnitude[size_t(r) * p.N + n] = mag;
      }
}

/// Checks C (bf16) against the reference, every element: rows past the last offset untouched
/// (NaN), the others within
///   |got - want| <= 2^-8 |want| + 1.01 acc * magnitude,
/// where 2^-8 is bf16's unit roundoff (a half unit in the last of its 8 significant bits,
/// relative), the bound of rounding the f32 result to bf16, and acc * magnitude bounds the
/// sum's rounding in f32 (K * 2^-24 per unit of the terms' magnitudes; on a GPU K * 2^-22,
/// for tensor cores' adders, which need not round to nearest; f8 tensor cores keep partial
/// sums in about 14 bits: 2^-11). Then the error in norm against the same bound:
/// 2^-8 plus 1e-4 for the sum (f8 on GPUs: 1e-3, as the scaled f8 GEMM's test). (Rounding to
/// bf16 alone gives about 1.6e-3 in norm: uniform errors of up to half a unit.)
void check(const Problem& p, const std::vector<bf16>& c, const std::string& what, bool f8 = false) {
  std::vector<double> want, magnitude;
  reference(p, want, magnitude);
  const double acc = !on_gpu() ? p.K * std::ldexp(1.0, -24) : f8 ? std::ldexp(1.0, -11) : p.K * std::ldexp(1.0, -22);
  std::vector<float> got_in, want_in;
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float got = float(c[i]);
    if (std::isnan(want[i])) {
      if (!std::isnan(got) && bad++ < 5)
        ADD_FAILURE() << what << ": C[" << i / p.N << ", " << i % p.N << "] written (" << got
                      << "), past the last offset";
      continue;
    }
    if (!(std::abs(got - want[i]) <= std::ldexp(std::abs(want[i]), -8) + 1.01 * acc * magnitude[i] + 1e-30) &&
        bad++ < 5)
      ADD_FAILURE() << what << ": C[" << i / p.N << ", " << i % p.N << "] = " << got << ", want " << want[i] << " seed "
                    << ref::last_seed();
    got_in.push_back(got), want_in.push_back(float(want[i]));
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements out of bounds, seed " << ref::last_seed();
  const double err = ref::rel_error(got_in, want_in), tol = std::ldexp(1.0, -8) + (f8 && on_gpu() ? 1e-3 : 1e-4);
  std::printf("  %s: relative error %.2e (bound %.2e)\n", what.c_str(), err, tol);
  EXPECT_LT(err, tol) << what << " seed " << ref::last_seed();
}

template <class T>
std::vector<T> rounded(std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(out[i] = T(v[i]));
  return out;
}

Problem problem(const std::vector<int>& sizes, int extra_rows, int N, int K, bool nk = true) {
  Problem p;
  p.N = N, p.K = K, p.E = int(sizes.size()), p.offs = offsets_of(sizes), p.nk = nk;
  p.rows = (p.offs.empty() ? 0 : p.offs.back()) + extra_rows;
  p.a = ref::random_floats(size_t(p.rows) * K);
  p.w = ref::random_floats(size_t(p.E) * N * K);
  return p;
}

/// Runs `g` on the problem (bf16), on the device where the target is a GPU; offsets from host
/// memory (checked, copied) or from device memory.
std::vector<bf16> run(GroupedGemm& g, Problem& p, bool device_offs = false) {
  auto a = rounded<bf16>(p.a), w = rounded<bf16>(p.w);
  std::vector<bf16> c(size_t(p.rows) * p.N, bf16::from_raw(0x7FC0));  // NaN
  if (!on_gpu()) {
    g.run(a.data(), w.data(), c.data(),
          device_offs ? GroupedGemm::Offsets(p.offs.data()) : GroupedGemm::Offsets(p.offs));
    return c;
  }
  cuda::Buffer<bf16> da(a), dw(w), dc(c);
  cuda::Buffer<int32_t> doffs(p.offs);
  if (device_offs)
    g.run(da.data(), dw.data(), dc.data(), doffs.data());
  else
    g.run(da.data(), dw.data(), dc.data(), p.offs);
  return dc.download();
}

/// The same in f8e4m3 with scales of the problem's form.
std::vector<bf16> run_f8(GroupedGemm& g, Problem& p) {
  auto a = rounded<f8e4m3>(p.a), w = rounded<f8e4m3>(p.w);
  std::vector<bf16> c(size_t(p.rows) * p.N, bf16::from_raw(0x7FC0));
  if (!on_gpu()) {
    g.run(a.data(), w.data(), c.data(), p.scale_a.data(), p.scale_w.data(), p.offs);
    return c;
  }
  cuda::Buffer<f8e4m3> da(a), dw(w);
  cuda::Buffer<bf16> dc(c);
  cuda::Buffer<float> dsa(p.scale_a), dsw(p.scale_w);
  g.run(da.data(), dw.data(), dc.data(), dsa.data(), dsw.data(), p.offs);
  return dc.download();
}

/// Small tiles for the CPU (BM rows of the table, BN x BK), a program per tile or `programs`
/// persistent ones.
kernels::GemmConfig small_tiles(int bm, int bn, int bk, int programs = 0) {
  kernels::GemmConfig g;
  g.bm = bm, g.bn = bn, g.programs = programs;
  g.constants = {{"BM", bm}, {"BN", bn}, {"BK", bk}, {"GROUP_M", 4}, {"PERSISTENT", programs > 0}};
  g.options = CompileOptions::from_env();
  if (on_gpu()) g.options.num_warps = 4, g.options.num_stages = 3;
  return g;
}

struct Case {
  const char* what;
  std::vector<int> sizes;
  int extra_rows, N, K;
};
// Uneven experts, empty ones (first, last, between), experts of fewer rows than BM, row counts
// that are not multiples of BM, rows past the last offset, E = 1, E above the table kernel's 32
// experts per step, K and N that end part-way through a tile.
const std::vector<Case> kCases = {
    {"uneven", {37, 0, 5, 90}, 0, 72, 48},
    {"empty first and last, rows past the end", {0, 70, 33, 0}, 9, 40, 40},
    {"E=1", {50}, 0, 33, 70},
    {"E=1, all rows past the end", {0}, 20, 32, 32},
    {"E=40, mostly tiny or empty",
     {3, 0, 0, 17, 1, 0, 0, 0, 2, 40, 0, 0, 0, 0,  0, 0, 0, 0, 0, 5,
      0, 0, 0, 0,  0, 0, 0, 0, 0, 0,  0, 0, 0, 33, 0, 1, 0, 0, 0, 9},
     0,
     48,
     32},
};

TEST(GroupedGemm, BF16UnevenAndEmptyExperts) {
  for (const Case& t : kCases)
    for (bool nk : {true, false}) {
      Problem p = problem(t.sizes, t.extra_rows, t.N, t.K, nk);
      GroupedGemm g(Target::default_target(), p.rows, p.N, p.K, p.E, ir::DType::bf16, GroupedGemm::Scaling::none,
                    nk ? GroupedGemm::Layout::nk : GroupedGemm::Layout::kn, small_tiles(16, 32, 32));
      check(p, run(g, p, /*device_offs=*/nk), str_cat(t.what, nk ? " W[E,N,K]" : " W[E,K,N]"));
    }
}

// The table the device builds: each expert's rows in BM-row tiles, expert by expert, then
// empty slots; against the same table made on the host.
TEST(GroupedGemm, TileTable) {
  if (on_gpu()) GTEST_SKIP() << "the table is read back on the host target";
  for (const Case& t : kCases) {
    Problem p = problem(t.sizes, t.extra_rows, 16, 16);
    const int bm = 16;
    GroupedGemm g(Target::host(), p.rows, p.N, p.K, p.E, ir::DType::bf16, GroupedGemm::Scaling::none,
                  GroupedGemm::Layout::nk, small_tiles(bm, 16, 16));
    run(g, p);
    std::vector<int32_t> want = {0};
    for (int e = 0, start = 0; e < p.E; start = p.offs[e], ++e)
      for (int r = start; r < p.offs[e]; r += bm, ++want[0])
        want.insert(want.end(), {e, r, std::min(r + bm, p.offs[e])});
    want.resize(size_t(1 + 3 * g.slots()), 0);
    EXPECT_EQ(g.tiles(), want) << t.what;
  }
}

// Persistent programs walking the table's tiles (3 programs; more than the tiles too).
TEST(GroupedGemm, PersistentPrograms) {
  for (int programs : {3, 64}) {
    Problem p = problem({37, 0, 5, 90}, 3, 72, 48);
    GroupedGemm g(Target::default_target(), p.rows, p.N, p.K, p.E, ir::DType::bf16, GroupedGemm::Scaling::none,
                  GroupedGemm::Layout::nk, small_tiles(16, 32, 32, programs));
    check(p, run(g, p), str_cat("persistent, ", programs, " programs"));
  }
}

// The library's own choice of tiles (grouped_gemm_config); on a GPU at larger shapes: 128- or
// 64-row tiles, wgmma on sm_90a, multiples of 16 (TMA where the compiler takes it) and not.
TEST(GroupedGemm, LibraryConfiguration) {
  std::vector<Case> cases = {{"library tiles", {100, 0, 7, 30}, 5, 96, 64}};
  if (on_gpu())
    cases.insert(cases.end(),
                 {{"E=8, 4000 rows", {700, 1, 0, 1200, 129, 640, 1000, 330}, 0, 512, 1024},
                  {"E=6, ragged N, K", {300, 0, 77, 513, 64, 1}, 7, 520, 1000},
                  {"E=16, small experts", {10, 40, 0, 5, 70, 33, 2, 100, 0, 0, 64, 8, 17, 90, 1, 3}, 0, 768, 512}});
  for (const Case& t : cases) {
    Problem p = problem(t.sizes, t.extra_rows, t.N, t.K);
    GroupedGemm g(Target::default_target(), p.rows, p.N, p.K, p.E);
    check(p, run(g, p), str_cat(t.what, " (", g.config().bm, "x", g.config().bn, ")"));
  }
}

// f8e4m3 with per-row scales (A's per row, W's per expert column) and DeepSeek-V3's per-block
// ones (A's per row and 128 columns, W's per 128 x 128 block of each expert).
void check_f8(bool blockwise) {
  std::vector<Case> cases = {{"uneven", {37, 0, 5, 90}, 3, 72, 200}, {"E=1", {20}, 0, 130, 256}};
  if (on_gpu()) cases.push_back({"E=8, 4000 rows", {700, 1, 0, 1200, 129, 640, 1000, 330}, 0, 512, 1024});
  for (const Case& t : cases) {
    Problem p = problem(t.sizes, t.extra_rows, t.N, t.K);
    for (auto* v : {&p.a, &p.w}) *v = ref::random_floats(v->size(), -2, 2);
    p.blockwise = blockwise;
    p.scale_a = ref::random_floats(blockwise ? size_t(p.rows) * p.kb() : size_t(p.rows), 0.25, 4);
    p.scale_w = ref::random_floats(size_t(p.E) * (blockwise ? size_t(p.nb()) * p.kb() : size_t(p.N)), 0.25, 4);
    const auto scaling = blockwise ? GroupedGemm::Scaling::blockwise : GroupedGemm::Scaling::rowwise;
    auto config = on_gpu() ? kernels::grouped_gemm_config(Target::default_target(), p.rows, p.N, p.K, p.E,
                                                          ir::DType::f8e4m3, blockwise)
                           : small_tiles(16, 32, 128);
    GroupedGemm g(Target::default_target(), p.rows, p.N, p.K, p.E, ir::DType::f8e4m3, scaling, GroupedGemm::Layout::nk,
                  config);
    check(p, run_f8(g, p), str_cat("f8e4m3 ", blockwise ? "blockwise " : "rowwise ", t.what), true);
  }
}
TEST(GroupedGemm, F8RowwiseScales) { check_f8(false); }
TEST(GroupedGemm, F8BlockwiseScales) { check_f8(true); }

// Where the library's configuration sends each form on Hopper: through the GPU passes, bf16 and
// f8 blockwise warp specialized, f8 rowwise not; $TILEDIST_LOWERING, when set, wins.
TEST(GroupedGemm, ConfigurationsOnHopper) {
  if (std::getenv("TILEDIST_LOWERING") || std::getenv("TILEDIST_WS")) GTEST_SKIP() << "the environment chooses";
  const Target hopper = Target::cuda("sm_90a");
  const auto bf16 = kernels::grouped_gemm_config(hopper, 16384, 4096, 7168, 8, ir::DType::bf16, false);
  EXPECT_TRUE(bf16.options.warp_specialize);
  EXPECT_EQ(bf16.options.lowering, "");
  const auto blockwise = kernels::grouped_gemm_config(hopper, 16384, 4096, 7168, 8, ir::DType::f8e4m3, true);
  EXPECT_EQ(blockwise.options.lowering, "");
  EXPECT_TRUE(blockwise.options.warp_specialize);
  const auto rowwise = kernels::grouped_gemm_config(hopper, 16384, 4096, 7168, 8, ir::DType::f8e4m3, false);
  EXPECT_EQ(rowwise.options.lowering, "");
  EXPECT_FALSE(rowwise.options.warp_specialize);
}

TEST(GroupedGemm, BadArguments) {
  const Target host = Target::host();
  auto expect = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << e << "' does not say '" << part << "'";
  };
  GroupedGemm g(host, 10, 16, 16, 3, ir::DType::bf16, GroupedGemm::Scaling::none, GroupedGemm::Layout::nk,
                small_tiles(16, 16, 16));
  std::vector<bf16> a(160), w(3 * 256), c(160);
  auto run_with = [&](std::vector<int32_t> offs) {
    return error_of([&] { g.run(a.data(), w.data(), c.data(), offs); });
  };
  expect(run_with({4, 2, 10}), "offs[1] = 2 < offs[0] = 4: offsets must not decrease");
  expect(run_with({4, 6, 11}), "offs[2] = 11 is past the 10 rows of A");
  expect(run_with({-1, 6, 10}), "offs[0] = -1 is negative");
  expect(run_with({4, 10}), "2 offsets for 3 experts");
  EXPECT_EQ(run_with({0, 0, 10}), "");
  std::vector<f8e4m3> a8(160), w8(3 * 256);
  std::vector<float> scale(64, 1.0f);
  expect(error_of(
             [&] { g.run(a8.data(), w8.data(), c.data(), scale.data(), scale.data(), std::vector<int32_t>{1, 2, 3}); }),
         "run with f8e4m3 operands and scales on a GroupedGemm made for bf16");
  expect(error_of([&] { GroupedGemm(host, 10, 16, 16, 3, ir::DType::f16); }),
         "operands of f16 (bf16, or f8e4m3 with scales)");
  expect(error_of([&] { GroupedGemm(host, 10, 16, 16, 3, ir::DType::f8e4m3); }), "f8e4m3 operands without scales");
  expect(error_of([&] { GroupedGemm(host, 10, 16, 16, 3, ir::DType::bf16, GroupedGemm::Scaling::rowwise); }),
         "bf16 operands with scales");
  expect(error_of([&] {
           GroupedGemm(host, 10, 16, 16, 3, ir::DType::f8e4m3, GroupedGemm::Scaling::rowwise, GroupedGemm::Layout::kn);
         }),
         "f8e4m3 weights in Layout::kn");
  expect(error_of([&] { GroupedGemm(host, 10, 16, 16, 0); }), "rows, N, K, E = 10, 16, 16, 0");
  expect(error_of([&] { GroupedGemm(host, 1 << 20, 1 << 12, 1 << 12, 1); }), "under 2^31 elements");
  GroupedGemm f8(host, 10, 16, 128, 2, ir::DType::f8e4m3, GroupedGemm::Scaling::rowwise, GroupedGemm::Layout::nk,
                 small_tiles(16, 16, 128));
  expect(error_of([&] { f8.run(a.data(), w.data(), c.data(), std::vector<int32_t>{1, 2}); }),
         "run with bf16 operands on a GroupedGemm made for f8e4m3");
  expect(error_of([&] {
           GroupedGemm(host, 10, 16, 128, 2, ir::DType::f8e4m3, GroupedGemm::Scaling::blockwise,
                       GroupedGemm::Layout::nk, small_tiles(16, 16, 64));
         }),
         "BK = 64, the scales' block is 128");
}

// What the GPU compiler makes of the library's kernels on sm_90a (compiled here, no GPU needed),
// so that a change in the compiler that loses them is seen: wgmma fed by TMA for bf16 in both
// weight layouts and for the rowwise f8 form (the expert's rows of W from a loaded expert id,
// a coordinate of a 3-D box).
TEST(GroupedGemm, Sm90aCode) {
  auto ptx = [](const KernelDef& def, Constants c, int warps) {
    CompileOptions opts;
    opts.num_warps = warps, opts.num_stages = 4;
    return jit::Context::global().emit(def, c, Target::cuda("sm_90a"), opts, jit::Stage::asm_, def.aligned_facts());
  };
  const Constants tiles = {{"BM", 128}, {"BN", 256}, {"BK", 64}};
  Constants nk = tiles, kn = tiles, f8 = tiles;
  nk.insert_or_assign("TRANS_W", 1), kn.insert_or_assign("TRANS_W", 0), f8.insert_or_assign("BK", 128);
  const std::string bf16_nk = ptx(kernels::grouped_gemm_kernel(), nk, 8),
                    bf16_kn = ptx(kernels::grouped_gemm_kernel(), kn, 8);
  const std::string rowwise = ptx(kernels::grouped_gemm_fp8_kernel(false), f8, 8);
  for (const std::string* p : {&bf16_nk, &bf16_kn, &rowwise}) EXPECT_NE(p->find("wgmma.mma_async"), std::string::npos);
  for (const std::string* p : {&bf16_nk, &bf16_kn, &rowwise})
    EXPECT_NE(p->find("cp.async.bulk.tensor"), std::string::npos);
  EXPECT_NE(ptx(kernels::grouped_gemm_tiles_kernel(), {{"BM", 128}}, 4).find(".entry"), std::string::npos);
}

// ---- kernels written from the README alone, checked against the same reference

// A program per BM rows of A (tiles not aligned to experts), the experts its rows span found
// by counting the offsets at or before its first and last row (no table), then a loop over
// those experts, each a K loop masked to the expert's rows, plus the expert's bias (an
// epilogue reading another tensor); W [E, K, N], C in f32.
void moe_search_bias(tl::Ptr<bf16> x, tl::Ptr<bf16> weights, tl::Ptr<float> bias, tl::Ptr<float> out,
                     tl::Ptr<int32_t> offs, tl::Int rows, tl::Int N, tl::Int K, tl::Int E, tl::Const<int> BM,
                     tl::Const<int> BN, tl::Const<int> BK) {
  auto r0 = tl::program_id(0) * BM;
  auto rm = r0 + tl::arange(0, BM);
  auto rn = tl::program_id(1) * BN + tl::arange(0, BN);
  auto last_row = tl::minimum(r0 + BM, rows) - 1;
  Values found = tl::for_range(0, E, 1, {tl::scalar(0, tl::int32), tl::scalar(0, tl::int32)}, [&](Tensor e, Values v) {
    auto end = tl::load(offs + e);
    return Values{v[0] + (end <= r0).to(tl::int32), v[1] + (end <= last_row).to(tl::int32)};
  });
  auto acc = tl::for_range(
      found[0], tl::minimum(found[1], E - 1) + 1, 1, tl::zeros({BM, BN}, tl::float32), [&](Tensor e, Tensor acc) {
        auto start = tl::where(e > 0, tl::load(offs + tl::maximum(e - 1, 0)), 0);
        auto mine = tl::expand_dims((rm >= start) & (rm < tl::load(offs + e)), 1);  // [BM, 1]
        auto part = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor part) {
          auto rk = k + tl::arange(0, BK);
          auto xa = tl::load(x + tl::expand_dims(rm, 1) * K + tl::expand_dims(rk, 0), mine & tl::expand_dims(rk < K, 0),
                             0.0f);
          auto wb = tl::load(weights + e.to(tl::int64) * K * N + tl::expand_dims(rk, 1) * N + tl::expand_dims(rn, 0),
                             tl::expand_dims(rk < K, 1) & tl::expand_dims(rn < N, 0), 0.0f);
          return tl::dot(xa, wb, part);
        });
        auto b = tl::load(bias + e * N + tl::expand_dims(rn, 0), tl::expand_dims(rn < N, 0), 0.0f);
        return acc + tl::where(mine, part + b, 0.0f);
      });
  auto total = tl::load(offs + (E - 1));
  tl::store(out + tl::expand_dims(rm, 1) * N + tl::expand_dims(rn, 0), acc,
            tl::expand_dims(rm < total, 1) & tl::expand_dims(rn < N, 0));
}
const KernelDef kSearchBias("moe_search_bias", moe_search_bias,
                            {"x", "weights", "bias", "out", "offs", "rows", "N", "K", "E", "BM", "BN", "BK"});

TEST(GroupedGemm, VariantSearchingOffsetsWithBias) {
  for (const Case& t : kCases) {
    Problem p = problem(t.sizes, t.extra_rows, t.N, t.K, /*nk=*/false);
    auto x = rounded<bf16>(p.a), w = rounded<bf16>(p.w);
    auto bias = ref::random_floats(size_t(p.E) * p.N);
    std::vector<float> out(size_t(p.rows) * p.N, NAN);
    const int bm = 32, bn = 32;
    compile(kSearchBias, {{"BM", bm}, {"BN", bn}, {"BK", 16}})
        .launch({tl::cdiv(p.rows, bm), tl::cdiv(p.N, bn)}, x, w, bias, out, p.offs, p.rows, p.N, p.K, p.E);
    std::vector<double> want, magnitude;
    reference(p, want, magnitude);
    std::vector<float> got_in, want_in;
    for (int e = 0, start = 0; e < p.E; start = p.offs[e], ++e)
      for (size_t i = size_t(start) * p.N; i < size_t(p.offs[e]) * p.N; ++i) {
        got_in.push_back(out[i]);
        want_in.push_back(float(want[i] + bias[size_t(e) * p.N + i % p.N]));
      }
    for (size_t i = size_t(p.rows - t.extra_rows) * p.N; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << t.what;
    // f32 out: the sum's rounding alone, under K 2^-24 of the terms' magnitudes, which are
    // about sqrt(K) times the result's: 1e-5 for K <= 100
    const double err = ref::rel_error(got_in, want_in);
    std::printf("  search + bias, %s: relative error %.2e\n", t.what, err);
    EXPECT_LT(err, 1e-5) << t.what << " seed " << ref::last_seed();
  }
}

// vLLM's fused_moe as its users write it: the host pads each expert's rows to BM
// (moe_align_block_size: row ids, padding marked by `rows`, and an expert per block); the
// kernel gathers its block's rows, walks K with pointers carried by the loop and advanced by
// strides (W [E, N, K] through strides), and multiplies by each row's routing weight before
// the store (MUL_ROUTED_WEIGHT).
void fused_moe(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<bf16> c, tl::Ptr<float> topk_weights,
               tl::Ptr<int32_t> sorted_ids, tl::Ptr<int32_t> expert_ids, tl::Int rows, tl::Int N, tl::Int K,
               tl::Int stride_am, tl::Int stride_be, tl::Int stride_bk, tl::Int stride_bn, tl::Int stride_cm,
               tl::Const<int> BLOCK_M, tl::Const<int> BLOCK_N, tl::Const<int> BLOCK_K) {
  auto pid_m = tl::program_id(0), pid_n = tl::program_id(1);
  auto offs_token = tl::load(sorted_ids + pid_m * BLOCK_M + tl::arange(0, BLOCK_M));
  auto token_mask = offs_token < rows;
  auto expert = tl::load(expert_ids + pid_m);
  auto offs_bn = pid_n * BLOCK_N + tl::arange(0, BLOCK_N);
  auto offs_k = tl::arange(0, BLOCK_K);
  auto a_ptrs = a + (tl::expand_dims(offs_token, 1) * stride_am + tl::expand_dims(offs_k, 0));
  auto b_ptrs =
      b + expert * stride_be + (tl::expand_dims(offs_k, 1) * stride_bk + tl::expand_dims(offs_bn, 0) * stride_bn);
  Values v = tl::for_range(
      0, tl::cdiv(K, BLOCK_K), 1, {tl::zeros({BLOCK_M, BLOCK_N}, tl::float32), a_ptrs, b_ptrs},
      [&](Tensor k, Values v) {
        auto left = K - k * BLOCK_K;
        auto at = tl::load(v[1], tl::expand_dims(token_mask, 1) & tl::expand_dims(offs_k < left, 0), 0.0f);
        auto bt = tl::load(v[2], tl::expand_dims(offs_k < left, 1) & tl::expand_dims(offs_bn < N, 0), 0.0f);
        return Values{tl::dot(at, bt, v[0]), v[1] + BLOCK_K, v[2] + BLOCK_K * stride_bk};
      });
  auto weight = tl::load(topk_weights + offs_token, token_mask, 0.0f);
  auto acc = v[0] * tl::expand_dims(weight, 1);
  tl::store(c + tl::expand_dims(offs_token, 1) * stride_cm + tl::expand_dims(offs_bn, 0), acc.to(tl::bfloat16),
            tl::expand_dims(token_mask, 1) & tl::expand_dims(offs_bn < N, 0));
}
const KernelDef kFusedMoe("fused_moe", fused_moe,
                          {"a", "b", "c", "topk_weights", "sorted_ids", "expert_ids", "rows", "N", "K", "stride_am",
                           "stride_be", "stride_bk", "stride_bn", "stride_cm", "BLOCK_M", "BLOCK_N", "BLOCK_K"});

TEST(GroupedGemm, VariantFusedMoeStyle) {
  for (const Case& t : kCases) {
    Problem p = problem(t.sizes, t.extra_rows, t.N, t.K, /*nk=*/true);
    auto a = rounded<bf16>(p.a), w = rounded<bf16>(p.w);
    auto routing = ref::random_floats(size_t(p.rows), 0, 1);
    const int bm = 16, bn = 32;
    std::vector<int32_t> sorted_ids, expert_ids;  // moe_align_block_size, on the host
    for (int e = 0, start = 0; e < p.E; start = p.offs[e], ++e)
      for (int r = start; r < p.offs[e]; r += bm) {
        expert_ids.push_back(e);
        for (int i = 0; i < bm; ++i) sorted_ids.push_back(r + i < p.offs[e] ? r + i : p.rows);
      }
    if (expert_ids.empty()) continue;  // (no block to launch)
    std::vector<bf16> c(size_t(p.rows) * p.N, bf16::from_raw(0x7FC0));
    compile(kFusedMoe, {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"BLOCK_K", 32}})
        .launch({int(expert_ids.size()), tl::cdiv(p.N, bn)}, a, w, c, routing, sorted_ids, expert_ids, p.rows, p.N, p.K,
                p.K, p.N * p.K, 1, p.K, p.N);
    // The reference times each row's weight: the same check as the library's (bf16 out).
    for (int r = 0; r < p.rows; ++r)
      for (int k = 0; k < p.K; ++k) p.a[size_t(r) * p.K + k] *= routing[r];
    check(p, c, str_cat("fused_moe style, ", t.what));
  }
}

}  // namespace
}  // namespace tiledist
