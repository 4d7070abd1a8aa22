// MoE grouped GEMM (kernels/grouped_gemm.h): a table of BM-row tiles built on the device from
// the experts' row offsets, then a GEMM whose programs read their tile's expert and rows from
// the table, as vLLM's fused_moe and Triton's grouped GEMM tutorial do.
//
// The operands are written so that today's GPU compiler can copy them by TMA (its rules:
// codegen/gpu.cpp, tma_operand): W [E, N, K] is seen as one 2-D tensor of E * N rows, the
// expert's rows starting at expert * N, masked by `row < w_rows`; A's rows are masked by
// `row < M` rather than by the tile's end. Both masks are exact for what is stored: a row of A
// past the tile's end (the next expert's) only makes rows of C that are not stored, a row of W
// past the expert's N (the next expert's) only columns of C that are not stored. The tile
// starts go through maximum(.., 0), which tells the compiler that they are not negative (a
// loaded value could be, as far as it knows).
#include "kernels/grouped_gemm.h"

#include <thread>

#include "kernels/gemm_tile.h"
#include "kernels/symmetric.h"
#include "support/matrix_instrs.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;
using tl::Values;

void grouped_gemm_tiles(tl::Ptr<int32_t> offs, tl::Ptr<int32_t> tiles, tl::Int E, tl::Int rows, tl::Int slots,
                        tl::Const<int> BM, tl::Const<int> TB, tl::Const<int> EB) {
  auto t = tl::program_id(0) * TB + tl::arange(0, TB);  // this program's slots
  auto slot = tl::expand_dims(t, 1);                    // [TB, 1]
  auto je = tl::arange(0, EB);
  auto before_or_at = tl::expand_dims(je, 0) <= tl::expand_dims(je, 1);  // [EB, EB]: (i, j) j <= i
  auto clamp = [&](const Tensor& x) { return tl::minimum(tl::maximum(x, 0), rows); };
  // Experts EB at a time: their tile counts, the running count of the tiles before them, and
  // for each slot of ours the expert it falls in (at most one: the sums below pick it).
  Values init = {tl::scalar(0, tl::int32), tl::zeros({TB}, tl::int32), tl::zeros({TB}, tl::int32),
                 tl::zeros({TB}, tl::int32)};
  Values out = tl::for_range(0, E, EB, init, [&](Tensor e0, Values v) {
    auto e = e0 + je;
    auto valid = e < E;
    auto end = clamp(tl::load(offs + e, valid, 0));
    auto start = clamp(tl::load(offs + tl::maximum(e - 1, 0), valid & (e > 0), 0));
    auto count = tl::where(valid, (tl::maximum(end - start, 0) + (BM - 1)) / BM, 0);
    auto ends = v[0] + tl::sum(tl::where(before_or_at, tl::expand_dims(count, 0), 0), 1);  // inclusive
    auto starts = tl::expand_dims(ends - count, 0), ends_row = tl::expand_dims(ends, 0);   // [1, EB]
    auto in = (slot >= starts) & (slot < ends_row);                                        // [TB, EB]
    auto first = tl::expand_dims(start, 0) + (slot - starts) * BM;
    auto last = tl::minimum(first + BM, tl::expand_dims(end, 0));
    return Values{v[0] + tl::sum(count, 0), v[1] + tl::sum(tl::where(in, tl::expand_dims(e, 0), 0), 1),
                  v[2] + tl::sum(tl::where(in, first, 0), 1), v[3] + tl::sum(tl::where(in, last, 0), 1)};
  });
  auto mask = t < slots;
  tl::store(tiles + 1 + t * 3, out[1], mask);
  tl::store(tiles + 2 + t * 3, out[2], mask);
  tl::store(tiles + 3 + t * 3, out[3], mask);
  // (the count is at most the slots; bad offsets could ask for more, which are not made)
  tl::store(tiles, tl::minimum(out[0], slots), tl::program_id(0) == 0);
}

/// One tile of C: rows [first, end), columns pid_n * BN + [0, BN), of one expert.
/// `dot_step(k, row, acc)` returns acc plus the tile's product over K columns [k, k + BK).
template <class Step, class Epilogue>
void expert_tile(tl::Ptr<bf16> c, tl::Int N, tl::Int K, const Tensor& first, const Tensor& end, const Tensor& pid_n,
                 int BM, int BN, int BK, Step dot_step, Epilogue epilogue) {
  auto row = tl::expand_dims(tl::maximum(first, 0) + tl::arange(0, BM), 1);  // [BM, 1]
  auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);             // [1, BN]
  auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32),
                           [&](Tensor k, Tensor acc) { return dot_step(k, row, acc); });
  tl::store(c + row * N + col, epilogue(acc, row, col).to(tl::bfloat16), (row < end) & (col < N));
}

/// The program's tiles: (table slot, column tile) in groups of GROUP_M slots taken column by
/// column (programs running at once share an expert's weights in L2); persistent programs walk
/// the table's count of them. `body(expert, first, end, pid_n)` for each non-empty one.
template <class Body>
void for_each_expert_tile(tl::Ptr<int32_t> tiles, tl::Int N, int BN, int GROUP_M, int PERSISTENT, Body body) {
  auto tile = [&](const Tensor& pid_m, const Tensor& pid_n) {
    auto entry = tiles + 1 + pid_m * 3;
    auto expert = tl::load(entry), first = tl::load(entry + 1), end = tl::load(entry + 2);
    if (PERSISTENT) return body(expert, first, end, pid_n);  // (the first `count` tiles: none empty)
    tl::if_then(first < end, [&] { body(expert, first, end, pid_n); });
  };
  if (PERSISTENT == 0) {
    auto [pid_m, pid_n] = detail::grouped_tile(GROUP_M);
    return tile(pid_m, pid_n);
  }
  auto num_m = tl::maximum(tl::load(tiles), 0), num_n = (tl::maximum(N, 0) + (BN - 1)) / BN;
  detail::for_each_tile(num_m, num_n, GROUP_M, tile);
}

/// acc + A[rows, k:k+BK] @ W[expert][cols, k:k+BK]^T with W [E, N, K] seen as [w_rows, K].
template <class T>
Tensor dot_nk(tl::Ptr<T> a, tl::Ptr<T> w, tl::Int M, tl::Int K, tl::Int w_rows, const Tensor& w_first, const Tensor& k,
              const Tensor& row, int BN, int BK, std::optional<Tensor> acc) {
  auto ka = tl::expand_dims(k + tl::arange(0, BK), 0);          // [1, BK]
  auto wrow = tl::expand_dims(w_first + tl::arange(0, BN), 1);  // [BN, 1]
  auto at = tl::load(a + row * K + ka, (row < M) & (ka < K), 0.0f);
  auto wt = tl::load(w + wrow * K + ka, (wrow < w_rows) & (ka < K), 0.0f);
  return tl::dot(at, tl::trans(wt), acc);
}

void grouped_gemm(tl::Ptr<bf16> a, tl::Ptr<bf16> w, tl::Ptr<bf16> c, tl::Ptr<int32_t> tiles, tl::Int M, tl::Int N,
                  tl::Int K, tl::Int w_rows, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK,
                  tl::Const<int> GROUP_M, tl::Const<int> TRANS_W, tl::Const<int> PERSISTENT) {
  auto none = [](const Tensor& acc, const Tensor&, const Tensor&) { return acc; };
  auto tile = [&](const Tensor& expert, const Tensor& first, const Tensor& end, const Tensor& pid_n) {
    if (TRANS_W) {  // W [E, N, K]: the expert's rows of W from expert * N
      auto w_first = tl::maximum(expert * N + pid_n * BN, 0);
      auto step = [&](const Tensor& k, const Tensor& row, const Tensor& acc) {
        return dot_nk(a, w, M, K, w_rows, w_first, k, row, BN, BK, acc);
      };
      return expert_tile(c, N, K, first, end, pid_n, BM, BN, BK, step, none);
    }
    // W [E, K, N]: the expert's K rows from expert * K (masked by K: a row past it would be
    // the next expert's, and A's zeros there need not meet finite weights). TMA copies it as
    // a tensor [E, K, N] with a box at (expert, k, n), for which the expert is not negative.
    auto w_e = w + tl::maximum(expert, 0).to(tl::int64) * K * N;
    auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);
    auto step = [&](const Tensor& k, const Tensor& row, const Tensor& acc) {
      auto ka = tl::expand_dims(k + tl::arange(0, BK), 0);
      auto kb = tl::expand_dims(k + tl::arange(0, BK), 1);
      auto at = tl::load(a + row * K + ka, (row < M) & (ka < K), 0.0f);
      auto wt = tl::load(w_e + kb * N + col, (kb < K) & (col < N), 0.0f);
      return tl::dot(at, wt, acc);
    };
    expert_tile(c, N, K, first, end, pid_n, BM, BN, BK, step, none);
  };
  for_each_expert_tile(tiles, N, BN, GROUP_M, PERSISTENT, tile);
}

template <bool BLOCKWISE>
void grouped_gemm_fp8(tl::Ptr<f8e4m3> a, tl::Ptr<f8e4m3> w, tl::Ptr<bf16> c, tl::Ptr<float> scale_a,
                      tl::Ptr<float> scale_w, tl::Ptr<int32_t> tiles, tl::Int M, tl::Int N, tl::Int K, tl::Int w_rows,
                      tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M,
                      tl::Const<int> PERSISTENT) {
  if (BLOCKWISE && BK != 128)
    throw Error(
        str_cat("tiledist: grouped_gemm_fp8_blockwise: BK = ", BK.value(), ", the scales' block is 128 (BK = 128)"));
  auto none = [](const Tensor& acc, const Tensor&, const Tensor&) { return acc; };
  auto rowwise = [&](const Tensor& expert, const Tensor& first, const Tensor& end, const Tensor& pid_n) {
    auto w_first = tl::maximum(expert * N + pid_n * BN, 0);
    auto step = [&](const Tensor& k, const Tensor& row, const Tensor& acc) {
      return dot_nk(a, w, M, K, w_rows, w_first, k, row, BN, BK, acc);
    };
    auto scale = [&](const Tensor& acc, const Tensor& row, const Tensor& col) {
      return acc * tl::load(scale_a + row, row < end, 0.0f) * tl::load(scale_w + expert * N + col, col < N, 0.0f);
    };
    expert_tile(c, N, K, first, end, pid_n, BM, BN, BK, step, scale);
  };
  // Each K block's product scaled into the accumulator by its row's and column block's scales
  // (DeepGEMM's promotion, which also keeps the f32 sum out of f8 wgmma's narrower one).
  auto blockwise = [&](const Tensor& expert, const Tensor& first, const Tensor& end, const Tensor& pid_n) {
    auto w_first = tl::maximum(expert * N + pid_n * BN, 0);
    auto kb = (K + 127) / 128, nb = (N + 127) / 128;
    auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);
    auto w_scales = scale_w + (expert * nb + col / 128) * kb;  // [1, BN]: each column's blocks
    auto step = [&](const Tensor& k, const Tensor& row, const Tensor& acc) {
      auto block = k / 128;
      auto sa = tl::load(scale_a + row * kb + block, row < M, 0.0f);  // [BM, 1]
      auto sw = tl::load(w_scales + block, col < N, 0.0f);            // [1, BN]
      return acc + dot_nk(a, w, M, K, w_rows, w_first, k, row, BN, BK, std::nullopt) * sa * sw;
    };
    expert_tile(c, N, K, first, end, pid_n, BM, BN, BK, step, none);
  };
  if constexpr (BLOCKWISE)
    for_each_expert_tile(tiles, N, BN, GROUP_M, PERSISTENT, blockwise);
  else
    for_each_expert_tile(tiles, N, BN, GROUP_M, PERSISTENT, rowwise);
}

const std::vector<std::string> kTileParams = {"offs", "tiles", "E", "rows", "slots", "BM", "TB", "EB"};
const Constants kTileDefaults = {{"BM", 64}, {"TB", 128}, {"EB", 32}};
const std::vector<std::string> kParams = {"a",      "w",  "c",  "tiles", "M",       "N",       "K",
                                          "w_rows", "BM", "BN", "BK",    "GROUP_M", "TRANS_W", "PERSISTENT"};
const Constants kDefaults = {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"TRANS_W", 1}, {"PERSISTENT", 0}};
const std::vector<std::string> kFp8Params = {"a", "w",      "c",  "scale_a", "scale_w", "tiles",   "M",         "N",
                                             "K", "w_rows", "BM", "BN",      "BK",      "GROUP_M", "PERSISTENT"};
const Constants kFp8Defaults = {{"BM", 64}, {"BN", 64}, {"BK", 128}, {"GROUP_M", 8}, {"PERSISTENT", 0}};

int64_t constant(const Constants& c, const char* name, int64_t otherwise) {
  auto it = c.find(name);
  const int64_t* v = it == c.end() ? nullptr : std::get_if<int64_t>(&it->second.v);
  return v ? *v : otherwise;
}
}  // namespace

const KernelDef& grouped_gemm_tiles_kernel() {
  static const KernelDef def("grouped_gemm_tiles", grouped_gemm_tiles, kTileParams, kTileDefaults);
  return def;
}
const KernelDef& grouped_gemm_kernel() {
  static const KernelDef def("grouped_gemm", grouped_gemm, kParams, kDefaults);
  return def;
}
const KernelDef& grouped_gemm_fp8_kernel(bool blockwise) {
  static const KernelDef rowwise_def("grouped_gemm_fp8_rowwise", grouped_gemm_fp8<false>, kFp8Params, kFp8Defaults);
  static const KernelDef blockwise_def("grouped_gemm_fp8_blockwise", grouped_gemm_fp8<true>, kFp8Params, kFp8Defaults);
  return blockwise ? blockwise_def : rowwise_def;
}

GemmConfig grouped_gemm_config(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t E, ir::DType dtype,
                               bool blockwise) {
  GemmConfig g;
  g.options = CompileOptions::from_env();
  const bool f8 = dtype == ir::DType::f8e4m3;
  g.constants = f8 ? kFp8Defaults : kDefaults;
  if (!target.is_gpu()) return g;  // (64x64 tiles)
  (void)K;
  // Experts of fewer rows than 128 on average: 64-row tiles (less of each tile wasted past
  // its expert's end); else 128. A program per tile, which the programs of empty slots leave
  // at once (persistent programs would put the K loop inside a tile loop, which neither
  // lowering's warp specialization takes with coordinates loaded from the table yet).
  const int bm = rows < 128 * E ? 64 : 128;
  const int bk = f8 ? 128 : 64;  // 128 bytes of K: wgmma's swizzled rows, TMA's boxes
  if (const MatrixInstr* wg = matrix_instr(target.arch, MatrixUnit::wgmma)) {
    // wgmma: a warpgroup per instruction's rows (M = 16 x warps), N its widest (256) where N
    // allows; f8: half that (ptxas spills the scaled forms' 256: the rowwise epilogue's scales,
    // the blockwise form's second accumulator)
    g.bm = bm, g.bn = N >= wg->n && !f8 ? wg->n : wg->n / 2;
    g.options.num_warps = bm / (wg->m / (wg->threads / 32)), g.options.num_stages = 4;
    // bf16: warp specialized (a producer warpgroup copies both operands by TMA, the expert a
    // coordinate: 0.99 of torch._grouped_mm at E = 8 in both weight layouts, on an H200,
    // against 0.98 / 0.83 by the since-deleted matched-loop lowering; bench/RESULTS.md). f8, E = 8, 16384 rows,
    // N = 4096, K = 7168 on an H200 (2026-11-26), since the scales load straight into the
    // accumulator's layout: blockwise warp specialized 402 TFLOP/s (345 not; the matched-loop
    // lowering 8), rowwise 1147 as it is (1153 warp specialized, the since-deleted matched-loop lowering 1128).
    if ((!f8 || blockwise) && detail::library_warp_specialize()) g.options.warp_specialize = true;
  } else {
    g.bm = bm, g.bn = 128;
    g.options.num_warps = 8, g.options.num_stages = 3;
  }
  g.constants.insert_or_assign("BM", g.bm);
  g.constants.insert_or_assign("BN", g.bn);
  g.constants.insert_or_assign("BK", bk);
  return g;
}

struct GroupedGemm::State {
  Target target;
  int64_t rows = 0, N = 0, K = 0, E = 0;
  ir::DType dtype = ir::DType::bf16;
  Scaling scaling = Scaling::none;
  Layout layout = Layout::nk;
  GemmConfig config;
  int64_t slots = 0;
  Grid grid{1}, table_grid{1};
  Kernel table, gemm;
  bool gpu = false;
  int32_t* tiles = nullptr;  // device memory on a GPU, else host_tiles'
  int32_t* offs = nullptr;   // (GPU) where host offsets are copied to
  std::vector<int32_t> host_tiles;
  std::unique_ptr<runtime::Event> done;  // (GPU) recorded after the last run
  detail::RunStreams streams;
  ~State() {
    streams.finish();
    if (gpu) {
      cuda::free(tiles);
      cuda::free(offs);
    }
  }
};

static constexpr int kTableSlotsPerProgram = 128;

GroupedGemm::GroupedGemm(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t experts, ir::DType dtype,
                         Scaling scaling, Layout layout)
    : GroupedGemm(target, rows, N, K, experts, dtype, scaling, layout,
                  grouped_gemm_config(target, rows, N, K, experts, dtype, scaling == Scaling::blockwise)) {}

GroupedGemm::GroupedGemm(const Target& target, int64_t rows, int64_t N, int64_t K, int64_t E, ir::DType dtype,
                         Scaling scaling, Layout layout, const GemmConfig& config)
    : s_(std::make_shared<State>()) {
  const bool f8 = dtype == ir::DType::f8e4m3;
  if (dtype != ir::DType::bf16 && !f8)
    throw Error(
        str_cat("tiledist: grouped_gemm: operands of ", ir::dtype_name(dtype), " (bf16, or f8e4m3 with scales)"));
  if (f8 == (scaling == Scaling::none))
    throw Error(str_cat(
        "tiledist: grouped_gemm: ", ir::dtype_name(dtype), " operands ",
        f8 ? "without scales (f8e4m3 takes Scaling::rowwise or blockwise)" : "with scales (only f8e4m3 takes them)"));
  if (f8 && layout != Layout::nk)
    throw Error(
        "tiledist: grouped_gemm: f8e4m3 weights in Layout::kn ([E, K, N]); they are taken as [E, N, K] (Layout::nk)");
  // (the kernels index A, W, C with 32-bit element numbers, W's rows through w_rows)
  if (rows < 0 || N < 1 || K < 1 || E < 1 || rows * K > INT32_MAX || rows * N > INT32_MAX || E * N * K > INT32_MAX)
    throw Error(str_cat("tiledist: grouped_gemm: rows, N, K, E = ", rows, ", ", N, ", ", K, ", ", E,
                        ": rows >= 0, N, K, E >= 1, and A, W and C under 2^31 elements each"));
  State& s = *s_;
  s.target = target, s.rows = rows, s.N = N, s.K = K, s.E = E, s.dtype = dtype, s.scaling = scaling, s.layout = layout;
  s.config = config;
  const int64_t bm = constant(config.constants, "BM", 64), bn = constant(config.constants, "BN", 64);
  const bool persistent = constant(config.constants, "PERSISTENT", 0) != 0;
  if (bm != config.bm || bn != config.bn || persistent != (config.programs > 0))
    throw Error(str_cat("tiledist: grouped_gemm: a configuration of ", config.bm, "x", config.bn, " tiles over ",
                        config.programs, " programs whose constants say BM = ", bm, ", BN = ", bn, ", PERSISTENT = ",
                        persistent, " (the same tiles; persistent programs, and only they, counted)"));
  s.slots = (rows + bm - 1) / bm + E;
  const int64_t tiles_n = (N + bn - 1) / bn;
  s.grid = config.programs > 0 ? Grid(static_cast<int>(std::min<int64_t>(config.programs, s.slots * tiles_n)))
                               : Grid(static_cast<int>(s.slots), static_cast<int>(tiles_n));
  s.table_grid = Grid(static_cast<int>((s.slots + kTableSlotsPerProgram - 1) / kTableSlotsPerProgram));
  s.table = compile(grouped_gemm_tiles_kernel(), {{"BM", bm}, {"TB", kTableSlotsPerProgram}, {"EB", 32}}, target);
  Constants constants = config.constants;
  if (!f8) constants.insert_or_assign("TRANS_W", layout == Layout::nk ? 1 : 0);
  s.gemm = compile(f8 ? grouped_gemm_fp8_kernel(scaling == Scaling::blockwise) : grouped_gemm_kernel(), constants,
                   target, config.options);
  s.gpu = detail::on_gpu(target);
  const size_t table_bytes = size_t(1 + 3 * s.slots) * sizeof(int32_t);
  if (s.gpu) {
    s.tiles = static_cast<int32_t*>(cuda::malloc(table_bytes));
    s.offs = static_cast<int32_t*>(cuda::malloc(size_t(E) * sizeof(int32_t)));
  } else {
    s.host_tiles.assign(size_t(1 + 3 * s.slots), 0);
    s.tiles = s.host_tiles.data();
  }
}

GroupedGemm::~GroupedGemm() = default;

void GroupedGemm::check_offsets(std::span<const int32_t> offs, int64_t rows, int64_t experts) {
  if (int64_t(offs.size()) != experts)
    throw Error(str_cat("tiledist: grouped_gemm: ", offs.size(), " offsets for ", experts,
                        " experts (offs holds each expert's cumulative end row: E entries)"));
  int64_t prev = 0;
  for (size_t e = 0; e < offs.size(); ++e) {
    if (offs[e] < prev)
      throw Error(e == 0 ? str_cat("tiledist: grouped_gemm: offs[0] = ", offs[0], " is negative")
                         : str_cat("tiledist: grouped_gemm: offs[", e, "] = ", offs[e], " < offs[", e - 1, "] = ", prev,
                                   ": offsets must not decrease (rows sorted by expert)"));
    if (offs[e] > rows)
      throw Error(str_cat("tiledist: grouped_gemm: offs[", e, "] = ", offs[e], " is past the ", rows, " rows of A"));
    prev = offs[e];
  }
}

void GroupedGemm::check_dtype(ir::DType given) const {
  if (s_->dtype == given) return;
  throw Error(given == ir::DType::bf16
                  ? str_cat("tiledist: grouped_gemm: run with bf16 operands on a GroupedGemm made for ",
                            ir::dtype_name(s_->dtype), " (which takes scales)")
                  : str_cat("tiledist: grouped_gemm: run with f8e4m3 operands and scales on a GroupedGemm made for ",
                            ir::dtype_name(s_->dtype)));
}
void GroupedGemm::run(const bf16* a, const bf16* w, bf16* c, Offsets offs, const runtime::Stream* stream) {
  check_dtype(ir::DType::bf16);
  launch(a, w, c, nullptr, nullptr, offs, stream);
}
void GroupedGemm::run(const f8e4m3* a, const f8e4m3* w, bf16* c, const float* scale_a, const float* scale_w,
                      Offsets offs, const runtime::Stream* stream) {
  check_dtype(ir::DType::f8e4m3);
  launch(a, w, c, scale_a, scale_w, offs, stream);
}
void GroupedGemm::run(const bf16* a, const bf16* w, bf16* c, const Table& table, const runtime::Stream* stream) {
  check_dtype(ir::DType::bf16);
  launch(a, w, c, nullptr, nullptr, Offsets(table.tiles), stream, &table);
}
void GroupedGemm::run(const f8e4m3* a, const f8e4m3* w, bf16* c, const float* scale_a, const float* scale_w,
                      const Table& table, const runtime::Stream* stream) {
  check_dtype(ir::DType::f8e4m3);
  launch(a, w, c, scale_a, scale_w, Offsets(table.tiles), stream, &table);
}

void GroupedGemm::launch(const void* a, const void* w, bf16* c, const float* scale_a, const float* scale_w,
                         Offsets offs, const runtime::Stream* stream, const Table* table) {
  State& s = *s_;
  const int32_t* offsets = offs.pointer;
  if (!offs.on_host && !offs.pointer)
    throw Error(str_cat("tiledist: grouped_gemm: no ", table ? "tile table" : "offsets", " (a null pointer)"));
  Grid grid = s.grid;
  if (table) {  // (built elsewhere: its tiles no longer than ours, its slots the grid's rows)
    if (table->block_rows < 1 || table->block_rows > s.config.bm || table->slots < 0 || table->slots > INT32_MAX)
      throw Error(str_cat("tiledist: grouped_gemm: a table of ", table->slots, " slots of tiles of up to ",
                          table->block_rows, " rows for a GEMM of ", s.config.bm,
                          "-row tiles (each tile at most the GEMM's rows)"));
    if (s.config.programs <= 0)
      grid = Grid(static_cast<int>(std::max<int64_t>(table->slots, 1)), static_cast<int>(grid.y));
  } else if (offs.on_host || !s.gpu) {  // (host memory: checked)
    std::span<const int32_t> h = offs.on_host ? offs.host : std::span<const int32_t>(offs.pointer, size_t(s.E));
    check_offsets(h, s.rows, s.E);
    offsets = h.data();
    if (s.gpu) {  // (into our copy, once the run before, which may read it, is done)
      if (s.done) s.done->synchronize();
      cuda::copy_to_device(s.offs, h.data(), h.size_bytes());
      offsets = s.offs;
    }
  }
  const runtime::Stream* on = s.gpu ? &s.streams.enter(stream, "grouped_gemm") : nullptr;
  const int rows = static_cast<int>(s.rows), N = static_cast<int>(s.N), K = static_cast<int>(s.K);
  const int w_rows = static_cast<int>(s.E * (s.layout == Layout::nk ? s.N : s.K));
  const int32_t* tiles = s.tiles;
  if (table)
    tiles = table->tiles;
  else
    detail::launch(s.table, on, s.table_grid, offsets, s.tiles, static_cast<int>(s.E), rows, static_cast<int>(s.slots));
  if (s.dtype == ir::DType::bf16)
    detail::launch(s.gemm, on, grid, static_cast<const bf16*>(a), static_cast<const bf16*>(w), c, tiles, rows, N, K,
                   w_rows);
  else
    detail::launch(s.gemm, on, grid, static_cast<const f8e4m3*>(a), static_cast<const f8e4m3*>(w), c, scale_a, scale_w,
                   tiles, rows, N, K, w_rows);
  if (on) {
    if (!s.done) s.done = std::make_unique<runtime::Event>(false);
    s.done->record(on);
    s.streams.leave(*on, stream);
  }
}

const GemmConfig& GroupedGemm::config() const { return s_->config; }
int64_t GroupedGemm::slots() const { return s_->slots; }
std::vector<int32_t> GroupedGemm::tiles() const { return s_->host_tiles; }

TILEDIST_REGISTER(grouped_gemm_tiles_kernel());
TILEDIST_REGISTER(grouped_gemm_kernel());
TILEDIST_REGISTER(grouped_gemm_fp8_kernel(false));
TILEDIST_REGISTER(grouped_gemm_fp8_kernel(true));

}  // namespace tiledist::kernels
