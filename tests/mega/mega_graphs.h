// What the mega kernel's tests share (tests/mega/): kernels written as Triton users write them
// (a row norm, a GEMM by tl::dot, an elementwise add, a GEMM carrying its pointers), host
// references, and a layer's worth of tasks over them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/reference.h"
#include "kernels/scratch.h"
#include "mega/mega_kernel.h"

namespace tiledist::testing_mega {
namespace ref = tiledist::reference;
using kernels::detail::Scratch;
using tl::Tensor;
using tl::Values;

// Each row scaled by the inverse of its root mean square, rounded to bf16: one program a row.
inline void row_norm(tl::Ptr<float> x, tl::Ptr<bf16> y, tl::Int cols, tl::Const<int> BLOCK) {
  auto base = tl::program_id(0) * cols;
  auto c = tl::arange(0, BLOCK);
  auto m = c < cols;
  auto v = tl::load(x + base + c, m, 0.0f);
  auto rstd = tl::rsqrt(tl::sum(v * v, 0) / cols.to(tl::float32) + 1e-6f);
  tl::store(y + base + c, (v * rstd).to(tl::bfloat16), m);
}
inline const KernelDef kRowNorm("row_norm", row_norm, {"x", "y", "cols", "BLOCK"}, {{"BLOCK", 128}});

// c = a · wᵀ (a: M × K, w: N × K, c: M × N, f32), a tile of c a program.
inline void matmul_nt(tl::Ptr<bf16> a, tl::Ptr<bf16> w, tl::Ptr<float> c, tl::Int M, tl::Int N, tl::Int K,
                      tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::expand_dims(tl::program_id(0) * BM + tl::arange(0, BM), 1);
  auto rn = tl::expand_dims(tl::program_id(1) * BN + tl::arange(0, BN), 0);
  auto rk = tl::arange(0, BK);
  auto acc = tl::for_range(0, K, BK, tl::zeros({BM, BN}, tl::float32), [&](Tensor k, Tensor acc) {
    auto ka = tl::expand_dims(k + rk, 0), kw = tl::expand_dims(k + rk, 1);
    auto at = tl::load(a + rm * K + ka, (rm < M) & (ka < K), 0.0f);
    auto wt = tl::load(w + rn * K + kw, (rn < N) & (kw < K), 0.0f);
    return tl::dot(at, wt, acc);
  });
  tl::store(c + rm * N + rn, acc, (rm < M) & (rn < N));
}
inline const KernelDef kMatmul("matmul_nt", matmul_nt, {"a", "w", "c", "M", "N", "K", "BM", "BN", "BK"},
                               {{"BM", 32}, {"BN", 32}, {"BK", 32}});

// out = x + y, BLOCK elements a program.
inline void add(tl::Ptr<float> x, tl::Ptr<float> y, tl::Ptr<float> out, tl::Int n, tl::Const<int> BLOCK) {
  auto i = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  tl::store(out + i, tl::load(x + i, i < n, 0.0f) + tl::load(y + i, i < n, 0.0f), i < n);
}
inline const KernelDef kAdd("add_f32", add, {"x", "y", "out", "n", "BLOCK"}, {{"BLOCK", 256}});

// c = a · b with the operands' pointers carried through the loop (Triton's tutorial), and the
// count of programs done kept by an atomic: what pointer_uses must see through.
inline void carried_matmul(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<float> c, tl::Ptr<int32_t> done, tl::Int M,
                           tl::Int N, tl::Int K, tl::Const<int> BM, tl::Const<int> BN, tl::Const<int> BK) {
  auto rm = tl::expand_dims(tl::program_id(0) * BM + tl::arange(0, BM), 1);
  auto rn = tl::expand_dims(tl::program_id(1) * BN + tl::arange(0, BN), 0);
  auto rk = tl::arange(0, BK);
  Values out = tl::for_range(
      0, tl::cdiv(K, BK), 1,
      {tl::zeros({BM, BN}, tl::float32), a + rm * K + tl::expand_dims(rk, 0), b + tl::expand_dims(rk, 1) * N + rn},
      [&](Tensor k, Values v) {
        auto at = tl::load(v[1], (rm < M) & (tl::expand_dims(rk, 0) < K - k * BK), 0.0f);
        auto bt = tl::load(v[2], (tl::expand_dims(rk, 1) < K - k * BK) & (rn < N), 0.0f);
        return Values{tl::dot(at, bt, v[0]), v[1] + BK, v[2] + BK * N};
      });
  tl::store(c + rm * N + rn, out[0], (rm < M) & (rn < N));
  tl::atomic_add(done, 1);
}
inline const KernelDef kCarried("carried_matmul", carried_matmul,
                                {"a", "b", "c", "done", "M", "N", "K", "BM", "BN", "BK"},
                                {{"BM", 32}, {"BN", 32}, {"BK", 32}});

inline std::vector<bf16> random_bf16(size_t n) {
  std::vector<float> f = ref::random_floats(n);
  return std::vector<bf16>(f.begin(), f.end());
}

// The host reference: norm (rounded to bf16), a · wᵀ, in double.
inline std::vector<double> norm_ref(const std::vector<double>& x, int64_t M, int64_t H) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < M; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < H; ++c) ss += x[size_t(r * H + c)] * x[size_t(r * H + c)];
    const double rstd = 1 / std::sqrt(ss / H + 1e-6);
    for (int64_t c = 0; c < H; ++c) y[size_t(r * H + c)] = double(float(bf16(float(x[size_t(r * H + c)] * rstd))));
  }
  return y;
}
inline std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<bf16>& w, int64_t M, int64_t N,
                                      int64_t K) {
  std::vector<double> c(size_t(M) * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[size_t(i * K + k)] * double(float(w[size_t(j * K + k)]));
      c[size_t(i * N + j)] = s;
    }
  return c;
}

inline double rel(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

// The graph's tasks as kernels launched one after the other, each over its own grid.
inline void launch_one_by_one(const mega::TaskGraph& g, const Target& target) {
  for (const mega::Task& t : g.tasks()) {
    std::vector<LaunchArg> args;
    for (const mega::Arg& a : t.args) {
      LaunchArg la = a.launch_arg();
      la.on_device = a.is_buffer && target.is_gpu();
      args.push_back(la);
    }
    compile(*t.def, t.constants, target).launch_args(t.grid, args);
  }
}

// A layer's worth of tasks over H × H weights: norm, GEMM, norm again of the GEMM's output
// into the same buffer the first GEMM read (it must wait for that GEMM's reads), a second
// GEMM, and the residual added.
struct Layer {
  int64_t M, H;
  Target target = Target::default_target();
  Scratch<float> x, h, h2, y;
  Scratch<bf16> n, w1, w2;
  std::vector<bf16> w1_host, w2_host;
  Layer(int64_t m, int64_t hid) : M(m), H(hid) {
    x = Scratch<float>(target, size_t(M * H));
    h = Scratch<float>(target, size_t(M * H));
    h2 = Scratch<float>(target, size_t(M * H));
    y = Scratch<float>(target, size_t(M * H));
    n = Scratch<bf16>(target, size_t(M * H));
    w1_host = random_bf16(size_t(H * H)), w2_host = random_bf16(size_t(H * H));
    w1 = Scratch<bf16>(target, w1_host), w2 = Scratch<bf16>(target, w2_host);
  }
  mega::TaskGraph graph() {
    using mega::in, mega::out, mega::inout;
    mega::TaskGraph g("layer");
    g.input(x.data(), M * H), g.input(w1.data(), H * H), g.input(w2.data(), H * H);
    const Grid mm(tl::cdiv(M, 32), tl::cdiv(H, 32));
    g.add("norm1", kRowNorm, {}, Grid(M), {in(x.data(), M, H, mega::rows(1)), out(n.data(), M, H, mega::rows(1)), H});
    g.add("gemm1", kMatmul, {}, mm,
          {in(n.data(), M, H, mega::rows(32)), in(w1.data(), H, H, mega::rows(32, 1)),
           out(h.data(), M, H, mega::block(32, 0, 32, 1)), M, H, H});
    g.add("norm2", kRowNorm, {}, Grid(M), {in(h.data(), M, H, mega::rows(1)), out(n.data(), M, H, mega::rows(1)), H});
    g.add("gemm2", kMatmul, {}, mm,
          {in(n.data(), M, H, mega::rows(32)), in(w2.data(), H, H, mega::rows(32, 1)),
           out(h2.data(), M, H, mega::block(32, 0, 32, 1)), M, H, H});
    g.add("residual", kAdd, {}, Grid(tl::cdiv(M * H, 256)),
          {in(x.data(), M * H, mega::cols(256)), in(h2.data(), M * H, mega::cols(256)),
           out(y.data(), M * H, mega::cols(256)), M * H});
    return g;
  }
  std::vector<double> reference(const std::vector<float>& xs) const {
    std::vector<double> xd(xs.begin(), xs.end());
    std::vector<double> y =
        matmul_ref(norm_ref(matmul_ref(norm_ref(xd, M, H), w1_host, M, H, H), M, H), w2_host, M, H, H);
    for (size_t i = 0; i < y.size(); ++i) y[i] += xd[i];
    return y;
  }
};

}  // namespace tiledist::testing_mega
