// Tiled GEMM through tl::dot: C[M,N] = A[M,K] @ B[K,N], f32 accumulation, masked edges. The
// grid is (cdiv(M, BM), cdiv(N, BN)); programs take their tiles in groups of GROUP_M rows of
// tiles, column by column, so that the programs running at once share operand tiles in L2.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/symmetric.h"
#include "support/matrix_instrs.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

/// PERSISTENT: a 1-D grid of programs (as many as the GPU has SMs) walks the tiles, program p
/// taking tiles p, p + programs, ... in the grouped order; with warp specialization the next
/// tile's loads then run under this one's epilogue.
template <class T>
void gemm(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K, tl::Const<int> BM,
          tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M, tl::Const<int> PERSISTENT,
          tl::Const<int> TRANSPOSED) {
  if (PERSISTENT == 0) {
    auto [pid_m, pid_n] = detail::grouped_tile(GROUP_M);
    return detail::gemm_tile(a, b, c, M, N, K, pid_m, pid_n, BM, BN, BK, TRANSPOSED != 0);
  }
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  detail::for_each_tile(num_m, num_n, GROUP_M, [&](const Tensor& pid_m, const Tensor& pid_n) {
    detail::gemm_tile(a, b, c, M, N, K, pid_m, pid_n, BM, BN, BK, TRANSPOSED != 0);
  });
}

const std::vector<std::string> kParams = {"a",  "b",  "c",  "M",       "N",          "K",
                                          "BM", "BN", "BK", "GROUP_M", "PERSISTENT", "TRANSPOSED"};
const Constants kDefaults = {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"PERSISTENT", 0}, {"TRANSPOSED", 0}};

/// Persistent, with the last wave split over K. Of T tiles over P programs, the first T - T % P
/// (the full waves) are walked as gemm's persistent programs walk them, a program per tile. Each
/// of the last R = T % P tiles is cut into S = min(P / R, MAX_PARTS, K steps) equal runs of K
/// steps, so that S * R <= P programs share the wave that R would leave P - R of idle. Program
/// v of the wave computes run c = v / R of tile t = v % R: the programs of one run start at the
/// same K and walk it in step, as the full waves do, so that their operands are read once from
/// memory into L2 and shared there. (Contiguous stream-K ranges, each program at its own K,
/// were measured slower than no split at all on an H200: the wave's reads no longer share L2
/// and it waits on HBM.) With S = 1 the wave's tiles are whole. Otherwise each run is stored to
/// `partials` (slot v) and counted in `counts` (a word per tile of the wave), and the run that
/// completes its tile's count sums the tile's runs in K order (the same bits whichever finishes
/// last), stores the sum and clears the count for the next launch. No program waits for
/// another. kernels::Gemm sizes the scratch and launches it.
template <class T>
void gemm_sk(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c, tl::Ptr<float> partials, tl::Ptr<int32_t> counts, tl::Int M,
             tl::Int N, tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M,
             tl::Const<int> MAX_PARTS, tl::Const<int> TRANSPOSED) {
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  auto tiles = num_m * num_n;
  auto programs = tl::num_programs(0), p = tl::program_id(0);
  auto steps = tl::maximum(tl::cdiv(tl::maximum(K, 0), BK), 1);  // K steps of a tile
  auto full = tiles / programs * programs;                       // the tiles of the full waves
  auto rest = tl::maximum(tiles % programs, 1);                  // the last wave's (at least 1)
  auto parts = tl::maximum(tl::minimum(tl::minimum(programs / rest, MAX_PARTS.value()), steps), 1);
  // (written so that the compiler sees that the K runs and tile coordinates are not negative,
  // as TMA needs)
  tl::for_range(p, full + programs, programs, [&](const Tensor& u) {
    auto whole = u < full;
    auto v = tl::maximum(u - full, 0);   // in the last wave: program v,
    auto part = v / rest, t = v % rest;  // with run `part` of tile t
    auto ours = !whole & (v < rest * parts) & (full < tiles);
    auto [pid_m, pid_n] = detail::grouped_tile(tl::where(whole, u, full + t), num_m, num_n, GROUP_M);
    auto k0 = tl::where(whole, 0, part * steps / parts * BK);
    auto k1 = tl::where(whole, K, tl::where(ours, tl::minimum((part + 1) * steps / parts * BK, K), k0));
    // (transposed: the accumulator and C's pointers [BN, BM], the partials' slots likewise)
    const bool tr = TRANSPOSED != 0;
    auto acc = detail::gemm_acc(a, b, M, N, K, pid_m, pid_n, BM, BN, BK, k0, k1, tr);
    auto [ptrs, mask] = detail::c_tile(c, M, N, pid_m, pid_n, BM, BN, tr);
    tl::if_then(whole | (ours & (parts == 1)), [&] { tl::store(ptrs, acc, mask); });
    tl::if_then(ours & (parts > 1), [&] {
      // (a run's slot laid out as C is: transposed, its dimension 0 contiguous, so that the sum's loads and its
      // store to C are coalesced alike)
      const int rows = tr ? BN.value() : BM.value(), cols = tr ? BM.value() : BN.value();
      auto in_tile = tr ? tl::expand_dims(tl::arange(0, rows), 1) + tl::expand_dims(tl::arange(0, cols), 0) * rows
                        : tl::expand_dims(tl::arange(0, rows), 1) * cols + tl::expand_dims(tl::arange(0, cols), 0);
      auto slot = [&](const Tensor& q) {  // run q of tile t
        return partials + ((q * rest + t) * (BM.value() * BN.value())).to(tl::int64) + in_tile;
      };
      tl::store(slot(part), acc);
      auto before = tl::atomic_add(counts + t, 1);  // (acq_rel: our run out, the others' in)
      tl::if_then(before == parts - 1, [&] {
        auto sum = tl::for_range(0, parts, 1, tl::zeros({rows, cols}, tl::float32),
                                 [&](Tensor q, Tensor s) { return s + tl::load(slot(q)); });
        tl::store(ptrs, sum, mask);
        tl::store(counts + t, 0);
      });
    });
  });
}
const std::vector<std::string> kSkParams = {"a", "b",  "c",  "partials", "counts",  "M",         "N",
                                            "K", "BM", "BN", "BK",       "GROUP_M", "MAX_PARTS", "TRANSPOSED"};
const Constants kSkDefaults = {{"BM", 64}, {"BN", 64}, {"BK", 32}, {"GROUP_M", 8}, {"MAX_PARTS", 4}, {"TRANSPOSED", 0}};

/// B comes transposed (Bt[N, K], K contiguous), as f8 tensor cores read both operands. The
/// scaling is done on the accumulator where it is (the MMA layout), straight into the stores.
template <class T>
void gemm_fp8(tl::Ptr<T> a, tl::Ptr<T> bt, tl::Ptr<float> c, tl::Ptr<float> scale_a, tl::Ptr<float> scale_b, tl::Int M,
              tl::Int N, tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK, tl::Const<int> GROUP_M,
              tl::Const<int> PERSISTENT) {
  auto scale = tl::load(scale_a) * tl::load(scale_b);
  auto tile = [&](const Tensor& pid_m, const Tensor& pid_n) {
    auto row = tl::expand_dims(pid_m * BM + tl::arange(0, BM), 1);  // [BM, 1]
    auto n = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 1);    // [BN, 1]: rows of Bt
    auto rk = tl::arange(0, BK);
    auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
      auto ka = tl::expand_dims(k + rk, 0);  // [1, BK]
      auto at = tl::load(a + row * K + ka, (row < M) & (ka < K), 0.0f);
      auto bt_tile = tl::load(bt + n * K + ka, (n < N) & (ka < K), 0.0f);
      return tl::dot(at, tl::trans(bt_tile), acc);
    });
    auto col = tl::expand_dims(pid_n * BN + tl::arange(0, BN), 0);  // [1, BN]
    tl::store(c + row * N + col, acc * scale, (row < M) & (col < N));
  };
  if (PERSISTENT == 0) {
    auto [pid_m, pid_n] = detail::grouped_tile(GROUP_M);
    return tile(pid_m, pid_n);
  }
  auto [num_m, num_n] = detail::tile_counts(M, N, BM, BN);
  detail::for_each_tile(num_m, num_n, GROUP_M, tile);
}
const std::vector<std::string> kFp8Params = {"a", "bt", "c",  "scale_a", "scale_b", "M",         "N",
                                             "K", "BM", "BN", "BK",      "GROUP_M", "PERSISTENT"};
const Constants kFp8Defaults = {{"BM", 64}, {"BN", 64}, {"BK", 64}, {"GROUP_M", 8}, {"PERSISTENT", 0}};

/// The library's GEMMs are persistent (and warp specialized on sm_90a) unless $TILEDIST_WS=0.
/// (CompileOptions::from_env() reads the same variable the other way: "1" asks every compile
/// for warp specialization.)
bool library_persistent() { return detail::library_warp_specialize(); }
int sm_count() { return cuda::available() ? cuda::device().sms : 132; }
}  // namespace

const KernelDef& gemm_fp8_kernel(ir::DType dtype) {
  static const KernelDef e4m3_def("gemm_fp8", gemm_fp8<f8e4m3>, kFp8Params, kFp8Defaults);
  static const KernelDef e5m2_def("gemm_fp8_e5m2", gemm_fp8<f8e5m2>, kFp8Params, kFp8Defaults);
  if (dtype == ir::DType::f8e4m3) return e4m3_def;
  if (dtype == ir::DType::f8e5m2) return e5m2_def;
  throw Error(str_cat("tiledist: no scaled f8 gemm for ", ir::dtype_name(dtype), " (f8e4m3, f8e5m2)"));
}
GemmConfig gemm_fp8_config(const Target& target, int64_t M, int64_t N, int64_t K) {
  GemmConfig g;
  g.options = CompileOptions::from_env();
  g.constants = kFp8Defaults;
  // wgmma: two warpgroups of m64n256, K of 128 bytes, 4 stages of 48 KiB (K-aligned shapes;
  // others take the generic variant's smaller tiles).
  const MatrixInstr* wg = matrix_instr(target.arch, MatrixUnit::wgmma);
  if (wg && wg->f8 && M % 16 == 0 && N % 16 == 0 && K % 16 == 0 && M > 64) {
    g.bm = 2 * wg->m, g.bn = wg->n, g.options.num_warps = 2 * wg->threads / 32, g.options.num_stages = 4;
    g.constants = {{"BM", g.bm}, {"BN", g.bn}, {"BK", 128}};
    // Persistent and warp specialized (f8 wgmma: 1.023 / 0.993 of cuBLAS at 8192^3, default /
    // fast accumulation, on an H200; the since-deleted matched-loop lowering 1.020 / 0.986 in the same run), unless
    // $TILEDIST_WS=0.
    if (library_persistent()) {
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.options.warp_specialize = true;
      g.programs = sm_count();
    }
  }
  return g;
}

namespace {
/// One of a GEMM's four definitions, by its operands' dtype.
const KernelDef& by_dtype(ir::DType dtype, const char* kernel, const KernelDef& bf16_def, const KernelDef& f16_def,
                          const KernelDef& f32_def, const KernelDef& e4m3_def) {
  switch (dtype) {
    case ir::DType::bf16:
      return bf16_def;
    case ir::DType::f16:
      return f16_def;
    case ir::DType::f32:
      return f32_def;
    case ir::DType::f8e4m3:
      return e4m3_def;
    default:
      throw Error(str_cat("tiledist: no ", kernel, " kernel for ", ir::dtype_name(dtype), " (bf16, f16, f32, f8e4m3)"));
  }
}
}  // namespace

const KernelDef& gemm_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("gemm", gemm<bf16>, kParams, kDefaults);
  static const KernelDef f16_def("gemm_f16", gemm<f16>, kParams, kDefaults);
  static const KernelDef f32_def("gemm_f32", gemm<float>, kParams, kDefaults);
  static const KernelDef e4m3_def("gemm_f8e4m3", gemm<f8e4m3>, kParams, kDefaults);
  return by_dtype(dtype, "gemm", bf16_def, f16_def, f32_def, e4m3_def);
}
const KernelDef& gemm_sk_kernel(ir::DType dtype) {
  static const KernelDef bf16_def("gemm_sk", gemm_sk<bf16>, kSkParams, kSkDefaults);
  static const KernelDef f16_def("gemm_sk_f16", gemm_sk<f16>, kSkParams, kSkDefaults);
  static const KernelDef f32_def("gemm_sk_f32", gemm_sk<float>, kSkParams, kSkDefaults);
  static const KernelDef e4m3_def("gemm_sk_f8e4m3", gemm_sk<f8e4m3>, kSkParams, kSkDefaults);
  return by_dtype(dtype, "gemm_sk", bf16_def, f16_def, f32_def, e4m3_def);
}

namespace {
/// The time a persistent GEMM's T tiles take on P programs, in tiles: its full waves, then the
/// last wave's tiles cut over K into as many runs as gemm_sk cuts them (Gemm's stream-K).
double sk_waves(int64_t tiles, int64_t programs, int64_t steps, int64_t max_parts) {
  const int64_t rest = tiles % programs;
  return double(tiles / programs) + (rest ? 1.0 / double(std::min({programs / rest, max_parts, steps})) : 0.0);
}
}  // namespace

GemmConfig gemm_config(const Target& target, int64_t M, int64_t N, int64_t K, bool transposable) {
  GemmConfig g;
  g.options = CompileOptions::from_env();
  // (else the launch gets the generic variant; but M only bounds the rows, whose tiles TMA
  // copies whatever it is: a skinny GEMM's M need not be a multiple of 16, as a decode step's
  // batch of 1)
  bool aligned = N % 16 == 0 && K % 16 == 0 && (M % 16 == 0 || M <= 256);
  const bool persistent = library_persistent();
  if (!target.is_gpu()) {  // persistent: a few programs per core
    g.constants = kDefaults;
    if (persistent) {
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.programs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()) * 2);
    }
  } else if (N < 128) {
    g.constants = kDefaults;
  } else if (!aligned) {  // element loads staged through registers: smaller warp tiles, more warps
    g.bm = 128, g.bn = 128, g.options.num_warps = 8, g.options.num_stages = 3;
    g.constants = {{"BM", 128}, {"BN", 128}, {"BK", 32}};
  } else if (M <= 256) {  // skinny: more, smaller tiles to fill the SMs
    // (on sm_90a, 8 stages of 24 KiB: the tiles' loads are what it waits for; 4 stages gave
    // 0.82 of cuBLAS at M=128, N=K=8192: bench/RESULTS.md)
    g.bm = 64, g.bn = 128, g.options.num_warps = 4, g.options.num_stages = target.has(Cap::wgmma) ? 8 : 4;
    // (a decode step's M (at most 64): $TILEDIST_DECODE_BN = 32 or 64 tries narrower tiles, more
    // of them to spread the weights' reads over the SMs; an experiment, unmeasured as yet)
    if (const char* bn = std::getenv("TILEDIST_DECODE_BN"); bn && M <= 64) {
      const int v = std::atoi(bn);
      if (v == 32 || v == 64) g.bn = v;
    }
    g.constants = {{"BM", 64}, {"BN", g.bn}, {"BK", 64}};
    // Hopper: warp specialized (a producer warpgroup beside the one of math: 431 TFLOP/s at
    // M=128 N=K=8192 on an H200, where the since-deleted matched-loop lowering gave 416 and cuBLAS about 420),
    // unless $TILEDIST_WS=0.
    if (target.has(Cap::wgmma) && persistent) g.options.warp_specialize = true;
    // A decode step's M (at most 64): its GEMMs read their weights once, and a tile's columns
    // read them at what one SM draws from memory. Where the tiles are fewer than the SMs, their
    // K is cut so that every SM reads: persistent, the last wave split over K (stream-K, up to
    // 8 runs a tile); for the kernels that take a program per tile (gemm_ar), split_k runs a
    // tile. ($TILEDIST_DECODE_SPLIT=0: whole tiles, to compare.)
    const char* split = std::getenv("TILEDIST_DECODE_SPLIT");
    if (M <= 64 && persistent && !(split && std::string(split) == "0")) {
      const int64_t sms = sm_count(), tiles = (M + g.bm - 1) / g.bm * ((N + g.bn - 1) / g.bn);
      const int64_t steps = (K + g.constant("BK", 64) - 1) / g.constant("BK", 64);
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.programs = int(sms);
      g.max_parts = 8;
      g.split_k = int(std::max<int64_t>(1, std::min<int64_t>({sms / std::max<int64_t>(tiles, 1), 8, steps / 4})));
    }
  } else if (const MatrixInstr* wg = matrix_instr(target.arch, MatrixUnit::wgmma)) {
    // wgmma: two warpgroups of its widest instruction (m64n256: 128x256 tiles), 4 stages of 48 KB
    const int rows = 2 * wg->m, cols = wg->n;
    g.bm = rows, g.bn = cols, g.options.num_warps = 2 * wg->threads / 32, g.options.num_stages = 4;
    g.constants = {{"BM", rows}, {"BN", cols}, {"BK", 64}};
    // Where N is short and M long, the same instruction's tiles may cover C better transposed:
    // 256 rows of C by 128 columns, computed as C^T's 128 x 256 (N = 1152: 9 columns of tiles
    // where 128x256 tiles take 4.5, the last half empty). Taken where its waves, the last one
    // split over K (stream-K), take 3% less time. Else, where 128x256 tiles would leave much
    // of the last wave idle, 128x128 tiles if their waves fill it 15% better (a 128x128 tile
    // does a little less math per byte it loads).
    const int64_t sms = sm_count(), steps = std::max<int64_t>((K + 63) / 64, 1), max_parts = 5;
    auto tiles = [&](int64_t bm, int64_t bn) { return (M + bm - 1) / bm * ((N + bn - 1) / bn); };
    auto fill = [&](int64_t bn) {  // of the waves of programs that the tiles take
      const int64_t t = tiles(rows, bn);
      return double(M) * N / (double((t + sms - 1) / sms) * sms * rows * bn);
    };
    if (transposable && library_persistent() &&
        sk_waves(tiles(cols, rows), sms, steps, max_parts) <
            0.97 * sk_waves(tiles(rows, cols), sms, steps, max_parts)) {
      g.bm = cols, g.bn = rows;
      g.constants = {{"BM", cols}, {"BN", rows}, {"BK", 64}, {"TRANSPOSED", 1}};
      g.max_parts = max_parts;
    } else if (fill(cols / 2) > 1.15 * fill(cols)) {
      g.bn = cols / 2;
      g.constants = {{"BM", rows}, {"BN", cols / 2}, {"BK", 64}};
    }
    // Persistent and warp specialized (TMA's producer warpgroup), unless $TILEDIST_WS=0 (the
    // warp_specialization pass takes the tile loop, stream-K's too: 0.952-0.996 of cuBLAS at the TP shapes on an H200,
    // bench/RESULTS.md); ag_gemm's, gemm_rs's and gemm_ar's on this configuration too (the producer waits for ag_gemm's
    // rows before copying them), and their per-tile forms (GemmConfig::per_tile).
    if (persistent) {
      g.constants.insert_or_assign("PERSISTENT", 1);
      g.options.warp_specialize = true;
      g.programs = sm_count();
    }
  } else {
    g.bm = 256, g.bn = 128, g.options.num_warps = 8, g.options.num_stages = 3;
    g.constants = {{"BM", 256}, {"BN", 128}, {"BK", 32}};
  }
  if (!transposable) g.constants.erase("TRANSPOSED");  // (the definition's defaults carry it)
  return g;
}

struct Gemm::State {
  Target target;
  int64_t M = 0, N = 0, K = 0;
  ir::DType dtype = ir::DType::bf16;
  GemmConfig config;
  Grid grid{1};
  bool stream_k = false;
  Kernel kernel;
  float* partials = nullptr;  // stream-K's scratch: device memory on a GPU, else host_partials'
  int32_t* counts = nullptr;  // (likewise)
  std::vector<float> host_partials;
  std::vector<int32_t> host_counts;
  detail::RunStreams streams;
  ~State() {  // (here, not in ~Gemm: copies of a Gemm share this)
    streams.finish();
    if (partials && partials != host_partials.data()) cuda::free(partials);
    if (counts && counts != host_counts.data()) cuda::free(counts);
  }
};

Gemm::Gemm(const Target& target, int64_t M, int64_t N, int64_t K, ir::DType dtype)
    : Gemm(target, M, N, K, dtype, gemm_config(target, M, N, K)) {}

Gemm::Gemm(const Target& target, int64_t M, int64_t N, int64_t K, ir::DType dtype, const GemmConfig& config)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  // (the kernels index A, B and C with 32-bit element numbers)
  if (M < 0 || N < 0 || K < 0 || M * K > INT32_MAX || K * N > INT32_MAX || M * N > INT32_MAX)
    throw Error(str_cat("tiledist: gemm: M, N, K = ", M, ", ", N, ", ", K,
                        ": not negative, and A, B and C under 2^31 elements each"));
  s.target = target, s.M = M, s.N = N, s.K = K, s.dtype = dtype, s.config = config;
  const int64_t bm = config.constant("BM", 64), bn = config.constant("BN", 64), bk = config.constant("BK", 32);
  const int64_t max_parts = config.constant("MAX_PARTS", config.max_parts);
  if (bm != config.bm || bn != config.bn || max_parts < 1)
    throw Error(str_cat("tiledist: gemm: a configuration of ", config.bm, "x", config.bn,
                        " tiles whose constants say BM = ", bm, ", BN = ", bn, ", MAX_PARTS = ", max_parts,
                        " (the same tiles, MAX_PARTS >= 1)"));
  // The kernel's arithmetic (gemm_sk), for the scratch: a slot per program of the last wave
  // (parts runs of each of its rest tiles), a count per tile of it; and its 32-bit step
  // numbers must not overflow (nor K plus a step).
  const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn), programs = config.programs;
  const int64_t rest = programs > 0 ? tiles % programs : 0, steps = std::max<int64_t>((K + bk - 1) / bk, 1);
  const int64_t parts = rest ? std::min({programs / rest, max_parts, steps}) : 1;
  const int64_t slots = parts * rest * bm * bn;
  s.stream_k = config.constant("PERSISTENT", 0) && parts > 1 && steps * parts < INT32_MAX && K + bk < INT32_MAX &&
               slots < INT32_MAX;
  Constants constants = config.constants;
  if (!s.stream_k) {
    constants.erase("MAX_PARTS");
    s.grid = config.grid(M, N);
    s.kernel = compile(gemm_kernel(dtype), constants, target, config.options);
    return;
  }
  constants.erase("PERSISTENT");
  constants.insert_or_assign("MAX_PARTS", ConstValue(max_parts));
  s.grid = Grid(static_cast<int>(programs));
  s.kernel = compile(gemm_sk_kernel(dtype), constants, target, config.options);
  if (detail::on_gpu(target)) {
    s.counts = static_cast<int32_t*>(cuda::malloc(size_t(rest) * sizeof(int32_t)));
    s.partials = static_cast<float*>(cuda::malloc(size_t(slots) * sizeof(float)));
    cuda::memset(s.counts, 0, size_t(rest) * sizeof(int32_t));  // done when it returns
  } else {
    s.host_partials.resize(size_t(slots));
    s.host_counts.assign(size_t(rest), 0);
    s.partials = s.host_partials.data();
    s.counts = s.host_counts.data();
  }
}

Gemm::~Gemm() = default;

template <GemmOperand T>
void Gemm::run(const T* a, const T* b, float* c, const runtime::Stream* stream) {
  State& s = *s_;
  if (dtype_of<T>() != s.dtype)
    throw Error(str_cat("tiledist: gemm: run with ", ir::dtype_name(dtype_of<T>()), " operands on a Gemm made for ",
                        ir::dtype_name(s.dtype)));
  const runtime::Stream* on = detail::on_gpu(s.target) ? &s.streams.enter(stream, "gemm", true) : nullptr;
  const int M = static_cast<int>(s.M), N = static_cast<int>(s.N), K = static_cast<int>(s.K);
  if (s.stream_k)
    detail::launch(s.kernel, on, s.grid, a, b, c, s.partials, s.counts, M, N, K);
  else
    detail::launch(s.kernel, on, s.grid, a, b, c, M, N, K);
  if (on) s.streams.leave(*on, stream);
}
template void Gemm::run(const bf16*, const bf16*, float*, const runtime::Stream*);
template void Gemm::run(const f16*, const f16*, float*, const runtime::Stream*);
template void Gemm::run(const float*, const float*, float*, const runtime::Stream*);
template void Gemm::run(const f8e4m3*, const f8e4m3*, float*, const runtime::Stream*);

const GemmConfig& Gemm::config() const { return s_->config; }
bool Gemm::stream_k() const { return s_->stream_k; }
Grid Gemm::grid() const { return s_->grid; }

TILEDIST_REGISTER(gemm_kernel(ir::DType::bf16));
TILEDIST_REGISTER(gemm_kernel(ir::DType::f16));
TILEDIST_REGISTER(gemm_kernel(ir::DType::f32));
TILEDIST_REGISTER(gemm_kernel(ir::DType::f8e4m3));
TILEDIST_REGISTER(gemm_sk_kernel(ir::DType::bf16));
TILEDIST_REGISTER(gemm_sk_kernel(ir::DType::f16));
TILEDIST_REGISTER(gemm_sk_kernel(ir::DType::f32));
TILEDIST_REGISTER(gemm_sk_kernel(ir::DType::f8e4m3));
TILEDIST_REGISTER(gemm_fp8_kernel(ir::DType::f8e4m3));
TILEDIST_REGISTER(gemm_fp8_kernel(ir::DType::f8e5m2));

}  // namespace tiledist::kernels
