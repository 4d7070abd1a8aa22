// The eDSL's ops, one feature per test, each kernel's output checked element by element
// against the same computation done on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/printer.h"
#include "kernels/reference.h"
#include "tiledist.h"

namespace tiledist {
namespace {
namespace ref = tiledist::reference;
using tl::Tensor;

std::vector<int32_t> random_ints(size_t n, int lo, int hi) {
  std::mt19937 rng(static_cast<uint32_t>(ref::random_floats(1)[0] * 1e6f) + 17);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ---- reductions of 64-bit values (an i64 sum past 2^32, an f64 row maximum), of 8- and 16-bit
// integers (a sum that wraps, a maximum of products that do), of a rank-3 block along its middle
// axis, and argmax over rows full of ties (the first index of the best)
void wide_reductions(tl::Ptr<int64_t> big, tl::Ptr<double> d, tl::Ptr<float> cube, tl::Ptr<int32_t> ties,
                     tl::Ptr<int64_t> big_sum, tl::Ptr<double> d_max, tl::Ptr<float> cube_sums,
                     tl::Ptr<int32_t> tie_args, tl::Ptr<int8_t> small, tl::Ptr<int8_t> small_sum,
                     tl::Ptr<int16_t> small_max) {
  tl::store(big_sum, tl::sum(tl::load(big + tl::arange(0, 256)), 0));
  auto s8 = tl::load(small + tl::arange(0, 256));
  tl::store(small_sum, tl::sum(s8, 0));  // (wraps, as 8-bit arithmetic does)
  tl::store(small_max, tl::max(tl::cast(s8, tl::int16) * tl::full({256}, 300, tl::int16), 0));
  auto rows = tl::expand_dims(tl::arange(0, 16), 1), cols = tl::expand_dims(tl::arange(0, 64), 0);
  tl::store(d_max + tl::arange(0, 16), tl::max(tl::load(d + rows * 64 + cols), 1));
  auto c = tl::reshape(tl::load(cube + tl::arange(0, 512)), {8, 8, 8});
  tl::store(cube_sums + tl::arange(0, 64), tl::reshape(tl::sum(c, 1), {64}));
  tl::store(tie_args + tl::arange(0, 16), tl::argmax(tl::load(ties + rows * 64 + cols), 1));
}
TEST(Ops, WideAndRank3Reductions) {
  auto f = ref::random_floats(256 + 1024 + 512, -1, 1);
  auto t = random_ints(1024, 0, 3);
  std::vector<int64_t> big(256);
  std::vector<double> d(1024);
  std::vector<float> cube(f.begin() + 1280, f.end());
  for (int i = 0; i < 256; ++i) big[i] = static_cast<int64_t>(double(f[i]) * (int64_t{1} << 40));
  for (int i = 0; i < 1024; ++i) d[i] = double(f[256 + i]) * 1e300;
  std::vector<int64_t> big_sum(1);
  std::vector<double> d_max(16);
  std::vector<float> cube_sums(64), want_cube(64);
  std::vector<int32_t> tie_args(16);
  auto small_ints = random_ints(256, -128, 127);
  std::vector<int8_t> small(small_ints.begin(), small_ints.end()), small_sum(1);
  std::vector<int16_t> small_max(1);
  compile(KernelDef("wide_reductions", wide_reductions,
                    {"big", "d", "cube", "ties", "big_sum", "d_max", "cube_sums", "tie_args", "small", "small_sum",
                     "small_max"}))
      .launch({1}, big, d, cube, t, big_sum, d_max, cube_sums, tie_args, small, small_sum, small_max);
  int32_t want_small = 0, want_max = -32768;
  for (int8_t v : small) want_small += v, want_max = std::max(want_max, int32_t(int16_t(v * 300)));
  EXPECT_EQ(small_sum[0], int8_t(want_small));
  EXPECT_EQ(small_max[0], int16_t(want_max));
  int64_t want_big = 0;
  for (int64_t v : big) want_big += v;
  EXPECT_EQ(big_sum[0], want_big);
  for (int r = 0; r < 16; ++r) {
    double m = d[size_t(r) * 64];
    int first = 0;
    for (int k = 0; k < 64; ++k) {
      m = std::max(m, d[size_t(r) * 64 + k]);
      if (t[size_t(r) * 64 + k] > t[size_t(r) * 64 + first]) first = k;
    }
    EXPECT_EQ(d_max[r], m) << r;
    EXPECT_EQ(tie_args[r], first) << r;
  }
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 8; ++k) {
      double s = 0;
      for (int j = 0; j < 8; ++j) s += cube[size_t(i) * 64 + j * 8 + k];
      want_cube[size_t(i) * 8 + k] = float(s);
    }
  EXPECT_LT(ref::rel_error(cube_sums, want_cube), 1e-6);
}

// ---- reductions along each axis of an 8 x 16 block
void reductions(tl::Ptr<float> x, tl::Ptr<float> sums, tl::Ptr<float> maxs, tl::Ptr<float> mins, tl::Ptr<int32_t> args,
                tl::Const<int> AXIS) {
  auto r = tl::expand_dims(tl::arange(0, 8), 1), c = tl::expand_dims(tl::arange(0, 16), 0);
  auto v = tl::load(x + r * 16 + c);
  int n = AXIS == 0 ? 16 : 8;
  auto o = tl::arange(0, n);
  tl::store(sums + o, tl::sum(v, AXIS));
  tl::store(maxs + o, tl::max(v, AXIS));
  tl::store(mins + o, tl::min(v, AXIS));
  tl::store(args + o, tl::argmax(v, AXIS));
  tl::store(args + n + o, tl::argmin(v, AXIS));
}
TEST(Ops, ReductionsAlongEachAxis) {
  KernelDef def("reductions", reductions, {"x", "sums", "maxs", "mins", "args", "AXIS"});
  for (int axis : {0, 1}) {
    auto x = ref::random_floats(128);
    int n = axis == 0 ? 16 : 8, len = axis == 0 ? 8 : 16;
    std::vector<float> sums(n), maxs(n), mins(n), want_sum(n);
    std::vector<int32_t> args(2 * n);
    compile(def, {{"AXIS", axis}}).launch({1}, x, sums, maxs, mins, args);
    for (int o = 0; o < n; ++o) {
      double s = 0;
      int amax = 0, amin = 0;
      auto at = [&](int k) { return axis == 0 ? x[k * 16 + o] : x[o * 16 + k]; };
      for (int k = 0; k < len; ++k) {
        s += at(k);
        if (at(k) > at(amax)) amax = k;
        if (at(k) < at(amin)) amin = k;
      }
      want_sum[o] = float(s);
      EXPECT_EQ(maxs[o], at(amax));
      EXPECT_EQ(mins[o], at(amin));
      EXPECT_EQ(args[o], amax);
      EXPECT_EQ(args[n + o], amin);
    }
    EXPECT_LT(ref::rel_error(sums, want_sum), 1e-6);
  }
}

// ---- atomics from many programs
void histogram(tl::Ptr<int32_t> vals, tl::Ptr<int32_t> hist, tl::Ptr<float> xs, tl::Ptr<float> total,
               tl::Ptr<float> biggest, tl::Int n) {
  auto offs = tl::program_id(0) * 128 + tl::arange(0, 128);
  auto m = offs < n;
  auto v = tl::load(vals + offs, m, 0);
  tl::atomic_add(hist + v, 1, m);
  auto x = tl::load(xs + offs, m, 0.0f);
  tl::atomic_add(total, tl::sum(x, 0), {}, {"relaxed", "gpu"});
  tl::atomic_max(biggest + tl::zeros({128}, tl::int32), x, m);
}
TEST(Ops, AtomicsFromManyPrograms) {
  int n = 10007;
  auto vals = random_ints(n, 0, 63);
  auto xs = ref::random_floats(n, 0, 1);
  std::vector<int32_t> hist(64, 0), want(64, 0);
  std::vector<float> total(1, 0), biggest(1, -1);
  compile(KernelDef("histogram", histogram, {"vals", "hist", "xs", "total", "biggest", "n"}))
      .launch({tl::cdiv(n, 128)}, vals, hist, xs, total, biggest, n);
  double sum = 0;
  float mx = -1;
  for (int i = 0; i < n; ++i) {
    want[vals[i]]++;
    sum += xs[i];
    mx = std::max(mx, xs[i]);
  }
  EXPECT_EQ(hist, want);
  EXPECT_NEAR(total[0], sum, 1e-5 * sum);
  EXPECT_EQ(biggest[0], mx);
}

void cas_counter(tl::Ptr<int32_t> counter, tl::Ptr<int32_t> seen, tl::Ptr<int32_t> retries) {
  // Read the counter, let a competitor increment it, then increment through a compare-and-swap
  // loop that starts from the stale value: the first CAS must fail and the loop retry.
  auto first = tl::load(counter);
  tl::atomic_add(counter, 1);
  auto out = tl::while_(
      {first, tl::scalar(1, tl::int32), tl::scalar(0, tl::int32)}, [&](tl::Values v) { return v[1] != 0; },
      [&](tl::Values v) {
        auto old = tl::atomic_cas(counter, v[0], v[0] + 1);
        auto failed = old != v[0];
        return tl::Values{tl::where(failed, old, v[0]), failed.to(tl::int32), v[2] + failed.to(tl::int32)};
      });
  auto pid = tl::program_id(0);
  tl::store(seen + pid, out[0]);
  tl::store(retries + pid, out[2]);
}
TEST(Ops, CompareAndSwapLoop) {
  // Holds however the programs interleave (one after another on the CPU, at once on a GPU).
  int n = 300;
  std::vector<int32_t> counter(1, 5), seen(n, -1), retries(n, -1);
  compile(KernelDef("cas_counter", cas_counter, {"counter", "seen", "retries"})).launch({n}, counter, seen, retries);
  EXPECT_EQ(counter[0], 5 + 2 * n);
  std::vector<int32_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "two CASes succeeded on one value";
  EXPECT_GE(sorted.front(), 6);
  EXPECT_LT(sorted.back(), 5 + 2 * n);
  for (int i = 0; i < n; ++i) EXPECT_GE(retries[i], 1) << "the CAS from a stale value did not fail, program " << i;
}

void exchange(tl::Ptr<int32_t> swapped) {
  auto pid = tl::program_id(0);
  tl::store(swapped + pid, tl::atomic_xchg(swapped + pid, pid + 100));
}
TEST(Ops, AtomicExchangeReturnsTheOldValue) {
  std::vector<int32_t> swapped(64, 7);
  compile(KernelDef("exchange", exchange, {"swapped"})).launch({64}, swapped);
  for (int v : swapped) EXPECT_EQ(v, 7);
}

// ---- loops and branches
void loops(tl::Ptr<int32_t> in, tl::Ptr<int32_t> out, tl::Ptr<float> vec) {
  auto pid = tl::program_id(0);
  auto n = tl::load(in + pid);
  // Collatz steps with a while loop carrying two scalars.
  auto r = tl::while_(
      {n, tl::scalar(0, tl::int32)}, [](tl::Values v) { return v[0] != 1; },
      [](tl::Values v) {
        auto odd = (v[0] % 2) == 1;
        return tl::Values{tl::where(odd, v[0] * 3 + 1, v[0] / 2), v[1] + 1};
      });
  tl::store(out + pid, r[1]);
  // A for loop carrying a scalar and a tensor: partial sums of 0..pid.
  auto res = tl::for_range(0, pid + 1, 1, {tl::scalar(0, tl::int32), tl::zeros({4}, tl::float32)},
                           [](Tensor i, tl::Values c) { return tl::Values{c[0] + i, c[1] + i.to(tl::float32)}; });
  tl::store(vec + pid * 4 + tl::arange(0, 4), res[1] + res[0].to(tl::float32));
  // A branch producing values.
  auto v = tl::if_then_else((pid % 2) == 0, [&] { return res[0] * 2; }, [&] { return -res[0]; });
  tl::store(out + 64 + pid, v);
}
TEST(Ops, LoopsAndBranches) {
  std::vector<int32_t> in(64), out(128, 0);
  std::vector<float> vec(256);
  for (int i = 0; i < 64; ++i) in[i] = i + 1;
  compile(KernelDef("loops", loops, {"in", "out", "vec"})).launch({64}, in, out, vec);
  for (int p = 0; p < 64; ++p) {
    int64_t x = p + 1, steps = 0;
    while (x != 1) {
      x = x % 2 ? 3 * x + 1 : x / 2;
      steps++;
    }
    EXPECT_EQ(out[p], steps) << p;
    int tri = p * (p + 1) / 2;
    for (int j = 0; j < 4; ++j) EXPECT_EQ(vec[p * 4 + j], float(2 * tri));
    EXPECT_EQ(out[64 + p], p % 2 == 0 ? 2 * tri : -tri);
  }
}

void zero_trip(tl::Ptr<float> out, tl::Int n) {
  auto acc = tl::for_range(0, n, 4, tl::full({8}, 3.0f, tl::float32), [](Tensor, Tensor a) { return a * 2; });
  tl::store(out + tl::arange(0, 8), acc);
}
TEST(Ops, ForLoopBoundsAndStep) {
  auto k = compile(KernelDef("zero_trip", zero_trip, {"out", "n"}));
  for (auto [n, trips] : {std::pair{0, 0}, {-5, 0}, {1, 1}, {4, 1}, {5, 2}, {17, 5}}) {
    std::vector<float> out(8);
    k.launch({1}, out, n);
    for (float v : out) EXPECT_EQ(v, 3.0f * float(1 << trips)) << "n=" << n;
  }
}

// ---- a tile whose addresses run down dimension 0 (a transposed tile's: element (r, c) at
// r + 64 c), read, written back scaled and written row-major; on a GPU its layout's registers
// run down dimension 0 and its accesses go 16 bytes at a time along it
void transposed_tile(tl::Ptr<float> x, tl::Ptr<float> y, tl::Ptr<float> z) {
  auto r = tl::expand_dims(tl::arange(0, 64), 1), c = tl::expand_dims(tl::arange(0, 128), 0);
  auto t = tl::load(x + r + c * 64);
  tl::store(y + r + c * 64, t * 2);
  tl::store(z + r * 128 + c, t);
}
TEST(Ops, TransposedTileKeepsEveryElementInPlace) {
  auto x = ref::random_floats(64 * 128);
  std::vector<float> y(x.size()), z(x.size());
  compile(KernelDef("transposed_tile", transposed_tile, {"x", "y", "z"})).launch({1}, x, y, z);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 128; ++c) {
      ASSERT_EQ(y[size_t(r + c * 64)], 2 * x[size_t(r + c * 64)]) << r << ", " << c;
      ASSERT_EQ(z[size_t(r * 128 + c)], x[size_t(r + c * 64)]) << r << ", " << c;
    }
}

// ---- casts between all dtypes
template <class T>
void cast_through(tl::Ptr<float> in, tl::Ptr<float> out, tl::Ptr<T> raw, tl::Int n) {
  auto o = tl::arange(0, 256);
  auto m = o < n;
  auto x = tl::load(in + o, m, 0.0f);
  auto y = x.to(dtype_of<T>());
  tl::store(raw + o, y, m);
  tl::store(out + o, y.to(tl::float32), m);
}
template <class T>
void check_cast(const std::string& name, std::function<float(float)> host) {
  int n = 200;
  auto in = ref::random_floats(n, -120, 120);
  in[0] = 0.0f, in[1] = -0.5f, in[2] = 0.5f, in[3] = 1.5f, in[4] = 2.5f, in[5] = -2.5f;
  std::vector<float> out(n);
  std::vector<T> raw(n);
  compile(KernelDef("cast_" + name, cast_through<T>, {"in", "out", "raw", "n"})).launch({1}, in, out, raw, n);
  for (int i = 0; i < n; ++i) {
    float want = host(in[i]);
    EXPECT_EQ(out[i], want) << name << " of " << in[i];
    EXPECT_EQ(float(raw[i]), want) << name << " stored, of " << in[i];
  }
}
TEST(Ops, CastsToEveryDtype) {
  using ir::DType;
  check_cast<bf16>("bf16", [](float x) { return round_to_dtype(x, DType::bf16); });
  check_cast<f16>("f16", [](float x) { return round_to_dtype(x, DType::f16); });
  check_cast<f8e4m3>("f8e4m3", [](float x) { return round_to_dtype(x, DType::f8e4m3); });
  check_cast<f8e5m2>("f8e5m2", [](float x) { return round_to_dtype(x, DType::f8e5m2); });
  check_cast<double>("f64", [](float x) { return x; });
  check_cast<int8_t>("i8", [](float x) { return float(int8_t(std::trunc(x))); });
  check_cast<int16_t>("i16", [](float x) { return float(int16_t(std::trunc(x))); });
  check_cast<int32_t>("i32", [](float x) { return float(int32_t(std::trunc(x))); });
  check_cast<int64_t>("i64", [](float x) { return float(int64_t(std::trunc(x))); });
}

void int_casts(tl::Ptr<int32_t> in, tl::Ptr<int8_t> narrow, tl::Ptr<int64_t> wide, tl::Ptr<bool> flags) {
  auto o = tl::arange(0, 64);
  auto x = tl::load(in + o);
  tl::store(narrow + o, x.to(tl::int8));
  tl::store(wide + o, x.to(tl::int64) * 1000000);
  tl::store(flags + o, x.to(tl::int1));
}
TEST(Ops, IntegerCastsWrapAndWiden) {
  auto in = random_ints(64, -100000, 100000);
  in[0] = 0;
  std::vector<int8_t> narrow(64);
  std::vector<int64_t> wide(64);
  std::unique_ptr<bool[]> flags(new bool[64]);
  compile(KernelDef("int_casts", int_casts, {"in", "narrow", "wide", "flags"}))
      .launch({1}, in, narrow, wide, std::span<bool>(flags.get(), 64));
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(narrow[i], int8_t(in[i]));
    EXPECT_EQ(wide[i], int64_t(in[i]) * 1000000);
    EXPECT_EQ(flags[i], in[i] != 0);
  }
}

// ---- narrow-float arithmetic rounds after every op, as a device computing in that format
void bf16_math(tl::Ptr<bf16> a, tl::Ptr<bf16> b, tl::Ptr<bf16> out) {
  auto o = tl::arange(0, 128);
  auto x = tl::load(a + o), y = tl::load(b + o);
  tl::store(out + o, x * y + x);
}
TEST(Ops, NarrowFloatsRoundEachOp) {
  auto af = ref::random_floats(128, -10, 10), bf = ref::random_floats(128, -10, 10);
  std::vector<bf16> a(128), b(128), out(128);
  for (int i = 0; i < 128; ++i) a[i] = bf16(af[i]), b[i] = bf16(bf[i]);
  compile(KernelDef("bf16_math", bf16_math, {"a", "b", "out"})).launch({1}, a, b, out);
  for (int i = 0; i < 128; ++i) {
    float prod = float(bf16(float(a[i]) * float(b[i])));
    EXPECT_EQ(out[i].bits, bf16(prod + float(a[i])).bits) << i;
  }
}

// ---- math functions
void math(tl::Ptr<float> x, tl::Ptr<float> out) {
  auto o = tl::arange(0, 64);
  auto v = tl::load(x + o);
  auto a = tl::abs(v);
  Tensor results[] = {
      tl::exp(v), tl::exp2(v), tl::log(a), tl::log2(a),  tl::sqrt(a), tl::rsqrt(a),          tl::abs(v),
      tl::erf(v), tl::sin(v),  tl::cos(v), tl::floor(v), tl::ceil(v), tl::minimum(v, 0.25f), tl::maximum(v, 0.25f),
      v / 3.0f,   -v};
  for (int i = 0; i < 16; ++i) tl::store(out + i * 64 + o, results[i]);
}
TEST(Ops, MathFunctions) {
  auto x = ref::random_floats(64, -4, 4);
  std::vector<float> out(16 * 64);
  compile(KernelDef("math", math, {"x", "out"})).launch({1}, x, out);
  std::function<double(double)> fns[] = {[](double v) { return std::exp(v); },
                                         [](double v) { return std::exp2(v); },
                                         [](double v) { return std::log(std::fabs(v)); },
                                         [](double v) { return std::log2(std::fabs(v)); },
                                         [](double v) { return std::sqrt(std::fabs(v)); },
                                         [](double v) { return 1 / std::sqrt(std::fabs(v)); },
                                         [](double v) { return std::fabs(v); },
                                         [](double v) { return std::erf(v); },
                                         [](double v) { return std::sin(v); },
                                         [](double v) { return std::cos(v); },
                                         [](double v) { return std::floor(v); },
                                         [](double v) { return std::ceil(v); },
                                         [](double v) { return std::min(v, 0.25); },
                                         [](double v) { return std::max(v, 0.25); },
                                         [](double v) { return v / 3; },
                                         [](double v) { return -v; }};
  for (int f = 0; f < 16; ++f) {
    std::vector<float> got(out.begin() + f * 64, out.begin() + (f + 1) * 64), want(64);
    for (int i = 0; i < 64; ++i) want[i] = float(fns[f](x[i]));
    EXPECT_LT(ref::rel_error(got, want), 2e-6) << "function " << f;
  }
}

// ---- integer arithmetic with C semantics
void int_ops(tl::Ptr<int32_t> a, tl::Ptr<int32_t> b, tl::Ptr<int32_t> out) {
  auto o = tl::arange(0, 64);
  auto x = tl::load(a + o), y = tl::load(b + o);
  auto s = y & 7;
  Tensor results[] = {x / y,
                      x % y,
                      x << s,
                      x >> s,
                      x & y,
                      x | y,
                      x ^ y,
                      tl::minimum(x, y),
                      tl::maximum(x, y),
                      -x,
                      ~x,
                      tl::abs(x),
                      (x < y).to(tl::int32) + (x == y).to(tl::int32) * 2};
  for (int i = 0; i < 13; ++i) tl::store(out + i * 64 + o, results[i]);
}
TEST(Ops, IntegerArithmetic) {
  auto a = random_ints(64, -1000, 1000), b = random_ints(64, -50, 50);
  for (auto& v : b)
    if (v == 0) v = 3;
  b[1] = a[1];
  std::vector<int32_t> out(13 * 64);
  compile(KernelDef("int_ops", int_ops, {"a", "b", "out"})).launch({1}, a, b, out);
  for (int i = 0; i < 64; ++i) {
    int x = a[i], y = b[i], s = y & 7;
    int want[] = {x / y,
                  x % y,
                  int(uint32_t(x) << s),
                  x >> s,
                  x & y,
                  x | y,
                  x ^ y,
                  std::min(x, y),
                  std::max(x, y),
                  -x,
                  ~x,
                  std::abs(x),
                  int(x < y) + int(x == y) * 2};
    for (int f = 0; f < 13; ++f) EXPECT_EQ(out[f * 64 + i], want[f]) << "op " << f << " of " << x << ", " << y;
  }
}

// ---- shapes: where, trans, reshape, broadcast_to, expand_dims, permute
void shapes(tl::Ptr<float> x, tl::Ptr<float> out) {
  auto r = tl::expand_dims(tl::arange(0, 4), 1), c = tl::expand_dims(tl::arange(0, 8), 0);
  auto m = tl::load(x + r * 8 + c);  // [4, 8]
  auto t = tl::trans(m);             // [8, 4]
  tl::store(out + tl::expand_dims(tl::arange(0, 8), 1) * 4 + tl::expand_dims(tl::arange(0, 4), 0), t);
  auto flat = tl::reshape(m, {32});
  tl::store(out + 32 + tl::arange(0, 32), tl::where(flat > 0, flat, 0.0f));
  auto row0 = tl::load(x + tl::arange(0, 8));  // [8]
  auto b = tl::broadcast_to(row0, {4, 8});
  tl::store(out + 64 + r * 8 + c, b + r.to(tl::float32));
  auto cube = tl::reshape(m, {2, 2, 8});
  auto p = tl::permute(cube, {2, 0, 1});  // [8, 2, 2]
  tl::store(out + 96 + tl::arange(0, 32), tl::reshape(p, {32}));
}
TEST(Ops, ShapeManipulation) {
  auto x = ref::random_floats(32);
  std::vector<float> out(128);
  compile(KernelDef("shapes", shapes, {"x", "out"})).launch({1}, x, out);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(out[j * 4 + i], x[i * 8 + j]);
      EXPECT_EQ(out[32 + i * 8 + j], std::max(x[i * 8 + j], 0.0f));
      EXPECT_EQ(out[64 + i * 8 + j], x[j] + float(i));
    }
  for (int k = 0; k < 8; ++k)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) EXPECT_EQ(out[96 + k * 4 + a * 2 + b], x[a * 16 + b * 8 + k]);
}

// ---- grids, hints and integer/narrow pointer types
void grid3(tl::Ptr<int32_t> out, tl::Ptr<int16_t> small, tl::Ptr<f8e5m2> f8) {
  auto id = (tl::program_id(2) * tl::num_programs(1) + tl::program_id(1)) * tl::num_programs(0) + tl::program_id(0);
  auto idx = tl::multiple_of(id * 4, 4);
  auto o = tl::max_contiguous(idx + tl::arange(0, 4), 4);
  tl::store(out + o, id * 10 + tl::arange(0, 4));
  tl::store(small + o, (id - 40).to(tl::int16));
  tl::store(f8 + o, tl::load(f8 + o) * 2.0f);
}
TEST(Ops, GridsHintsAndSmallTypes) {
  std::vector<int32_t> out(3 * 4 * 5 * 4, -1);
  std::vector<int16_t> small(out.size());
  std::vector<f8e5m2> f8(out.size());
  for (size_t i = 0; i < f8.size(); ++i) f8[i] = f8e5m2(float(i % 7) - 3.0f);
  auto k = compile(KernelDef("grid3", grid3, {"out", "small", "f8"}));
  std::string printed = ir::print(k.ir());
  EXPECT_NE(printed.find("hint"), std::string::npos);
  EXPECT_NE(printed.find("multiple_of = 4"), std::string::npos);
  k.launch({3, 4, 5}, out, small, f8);
  for (int id = 0; id < 60; ++id)
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(out[id * 4 + j], id * 10 + j);
      EXPECT_EQ(small[id * 4 + j], id - 40);
      EXPECT_EQ(float(f8[id * 4 + j]), 2.0f * (float((id * 4 + j) % 7) - 3.0f));
    }
}

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {

// ---- dot on every input dtype it takes, including both f8 formats
template <class T>
void small_dot(tl::Ptr<T> a, tl::Ptr<T> b, tl::Ptr<float> c) {
  auto m = tl::expand_dims(tl::arange(0, 16), 1), k = tl::arange(0, 32), n = tl::expand_dims(tl::arange(0, 8), 0);
  auto at = tl::load(a + m * 32 + tl::expand_dims(k, 0));
  auto bt = tl::load(b + tl::expand_dims(k, 1) * 8 + n);
  tl::store(c + m * 8 + n, tl::dot(at, bt, tl::full({16, 8}, 0.5f, tl::float32)));
}
template <class T>
void check_dot(const std::string& name) {
  auto af = ref::random_floats(16 * 32, -2, 2), bf = ref::random_floats(32 * 8, -2, 2);
  std::vector<T> a(af.size()), b(bf.size());
  for (size_t i = 0; i < af.size(); ++i) af[i] = float(a[i] = T(af[i]));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(b[i] = T(bf[i]));
  std::vector<float> c(16 * 8), want;
  compile(KernelDef("dot_" + name, small_dot<T>, {"a", "b", "c"})).launch({1}, a, b, c);
  ref::gemm(af, bf, want, 16, 8, 32);
  for (auto& w : want) w += 0.5f;
  EXPECT_LT(ref::rel_error(c, want), 1e-6) << name;
}
TEST(Ops, DotOnEveryInputDtype) {
  check_dot<float>("f32");
  check_dot<bf16>("bf16");
  check_dot<f16>("f16");
  check_dot<f8e4m3>("f8e4m3");
  check_dot<f8e5m2>("f8e5m2");
}

// ---- literals take the other operand's type (Triton's weak typing); tensors promote
void promotion(tl::Ptr<int32_t> i, tl::Ptr<float> f, tl::Ptr<bf16> h) {
  auto o = tl::arange(0, 8);
  auto x = tl::load(i + o);
  tl::store(f + o, x * 2 + 0.5f);  // i32 * int -> i32; + float literal -> f32
  tl::store(f + 8 + o, x / 2);     // integer division truncates
  auto y = tl::load(h + o);
  tl::store(h + 8 + o, y * 3);                   // stays bf16
  tl::store(f + 16 + o, y + x);                  // bf16 + i32 -> bf16
  tl::store(f + 24 + o, y.to(tl::float32) + x);  // f32 + i32 -> f32
}
TEST(Ops, TypePromotion) {
  std::vector<int32_t> i = {-7, -3, -1, 0, 1, 3, 7, 301};
  std::vector<float> f(32);
  std::vector<bf16> h(16);
  for (int k = 0; k < 8; ++k) h[k] = bf16(1.0f / float(k + 3));
  auto kernel = compile(KernelDef("promotion", promotion, {"i", "f", "h"}));
  kernel.launch({1}, i, f, h);
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(f[k], float(i[k] * 2) + 0.5f);
    EXPECT_EQ(f[8 + k], float(i[k] / 2));
    EXPECT_EQ(h[8 + k].bits, bf16(float(h[k]) * 3).bits);
    EXPECT_EQ(f[16 + k], float(bf16(float(h[k]) + float(bf16(float(i[k]))))));
    EXPECT_EQ(f[24 + k], float(h[k]) + float(i[k]));
  }
}

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {

// ---- regressions found in review: each kernel once crashed or gave a wrong answer
void masked_division(tl::Ptr<int32_t> in, tl::Ptr<int32_t> out, tl::Int n) {
  auto o = tl::arange(0, 8);
  auto m = o < n;
  auto x = tl::load(in + o, m, 0);  // masked-off lanes divide by zero
  tl::store(out + o, 100 / x + 100 % x, m);
  auto big = tl::full({8}, INT32_MIN, tl::int32);
  tl::store(out + 8 + o, big / tl::where(m, -1, 1) + 0 * x, o >= n);  // MIN / -1 only on masked-off lanes
  tl::store(out + 16 + o, (x << 40) + (tl::load(in + o) >> 40));      // shifts past the width
}
TEST(Regressions, IntegerDivisionOnMaskedLanesAndWideShifts) {
  std::vector<int32_t> in = {7, -9, 3, 1, 50, -4, -6, 11}, out(24, -1);
  compile(KernelDef("masked_division", masked_division, {"in", "out", "n"})).launch({1}, in, out, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], 100 / in[i] + 100 % in[i]);
  for (int i = 5; i < 8; ++i) EXPECT_EQ(out[8 + i], INT32_MIN);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[16 + i], in[i] < 0 ? -1 : 0) << i;
}

void narrow_literals(tl::Ptr<int8_t> x, tl::Ptr<int32_t> out) {
  auto o = tl::arange(0, 4);
  auto v = tl::load(x + o);
  tl::store(out + o, (v < 200).to(tl::int32) + (v > -300).to(tl::int32) * 10);
  tl::store(out + 4, tl::scalar(2, tl::int32).to(tl::int1).to(tl::int32));
  auto f = tl::scalar(16777217.0, tl::float32) + 1.0f;       // folded: must round as f32 does
  auto g = tl::load(out + 5).to(tl::float32) + 16777217.0f;  // at run time
  tl::store(out + 6, (f == g).to(tl::int32));
  auto s = tl::reshape(tl::sum(v.to(tl::int32), 0), {1});  // reshape of a scalar
  tl::store(out + 7 + tl::arange(0, 1), s);
}
TEST(Regressions, LiteralsConstantsAndScalarReshape) {
  std::vector<int8_t> x = {-100, 0, 50, 127};
  std::vector<int32_t> out(8, 0);
  out[5] = 1;
  compile(KernelDef("narrow_literals", narrow_literals, {"x", "out"})).launch({1}, x, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 11) << "int8 compared with a literal out of its range";
  EXPECT_EQ(out[4], 1) << "2 cast to i1 must be true";
  EXPECT_EQ(out[6], 1) << "folded and run-time f32 arithmetic disagree";
  EXPECT_EQ(out[7], -100 + 0 + 50 + 127);
}

// An f32 dot (FMA path on GPUs) accumulating onto the result of a bf16 dot (tensor cores).
void dot_chain(tl::Ptr<bf16> a, tl::Ptr<float> x, tl::Ptr<float> out) {
  auto r = tl::expand_dims(tl::arange(0, 16), 1), c = tl::expand_dims(tl::arange(0, 16), 0);
  auto at = tl::load(a + r * 16 + c);
  auto first = tl::dot(at, at);
  auto xt = tl::load(x + r * 16 + c);
  tl::store(out + r * 16 + c, tl::dot(xt, xt, first));
}
TEST(Regressions, DotChainAcrossLowerings) {
  auto af = ref::random_floats(256), x = ref::random_floats(256);
  std::vector<bf16> a(256);
  for (int i = 0; i < 256; ++i) af[i] = float(a[i] = bf16(af[i]));
  std::vector<float> out(256), first, second;
  compile(KernelDef("dot_chain", dot_chain, {"a", "x", "out"})).launch({1}, a, x, out);
  ref::gemm(af, af, first, 16, 16, 16);
  ref::gemm(x, x, second, 16, 16, 16);
  for (int i = 0; i < 256; ++i) second[i] += first[i];
  EXPECT_LT(ref::rel_error(out, second), 1e-5);
}

void permute_scalar(tl::Ptr<float> x) { tl::permute(tl::load(x), {}); }
TEST(Regressions, PermuteOfAScalarIsAnError) {
  try {
    KernelDef("permute_scalar", permute_scalar, {"x"}).trace({});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {  // (named as the kernel calls it, not as trans)
    EXPECT_NE(std::string(e.what()).find("op 'permute'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs a tensor, got f32"), std::string::npos) << e.what();
  }
}
TEST(Regressions, KernelNamesAreIdentifiers) { EXPECT_THROW(KernelDef("my-kernel", permute_scalar, {"x"}), Error); }

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {

// A chain of 24 elementwise ops on a 4096-element block: only a few blocks are live at once,
// so the host's scratch must hold a few, not 24 (each is 16 KiB).
void long_chain(tl::Ptr<float> x, tl::Ptr<float> y) {
  auto o = tl::arange(0, 4096);
  auto v = tl::load(x + o);
  for (int i = 0; i < 24; ++i) v = v * 1.0001f + 0.5f;
  tl::store(y + o, v);
}
TEST(Host, ScratchIsReusedAcrossDeadValues) {
  if (Target::default_target().kind != Target::Kind::host) GTEST_SKIP() << "scratch is a host-backend notion";
  auto x = ref::random_floats(4096);
  std::vector<float> y(4096), want(4096);
  auto k = compile(KernelDef("long_chain", long_chain, {"x", "y"}));
  EXPECT_LE(k.scratch_bytes(), 8 * 4096 * 4) << "dead blocks do not give their scratch back";
  k.launch({1}, x, y);
  for (int i = 0; i < 4096; ++i) {
    float v = x[i];
    for (int r = 0; r < 24; ++r) v = v * 1.0001f + 0.5f;
    want[i] = v;
  }
  EXPECT_LT(ref::rel_error(y, want), 1e-6);
}

}  // namespace
}  // namespace tiledist
