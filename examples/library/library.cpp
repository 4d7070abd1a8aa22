// The kernel library from a program of its own, on every rank (processes started by
// tiledist-run): kernels::Collectives agrees on a random seed (rank 0's, by an all-reduce),
// kernels::Gemm multiplies this rank's A by B, and kernels::AgGemm multiplies the rows that
// every rank holds, gathered, by B, the gather overlapped with the GEMM. On the CPU backend, or
// on the GPUs with `library cuda`. Each result is checked, every element, against products
// computed here in double from the same bf16 inputs.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tiledist.h"

using namespace tiledist;

// An array in the memory the target's kernels take: the GPU's, or the host's.
template <class T>
struct Array {
  std::vector<T> host;
  std::unique_ptr<cuda::Buffer<T>> device;
  Array(std::vector<T> v, bool gpu) : host(std::move(v)) {
    if (gpu) device = std::make_unique<cuda::Buffer<T>>(host);
  }
  T* data() { return device ? device->data() : host.data(); }
  std::vector<T> get() const { return device ? device->download() : host; }
};

// A rows x cols matrix of bf16 values drawn from `seed`.
std::vector<bf16> random_matrix(uint32_t seed, int64_t rows, int64_t cols) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<bf16> m(size_t(rows * cols));
  for (bf16& v : m) v = bf16(uniform(rng));
  return m;
}

// The error of C against A[M, K] @ B[K, N] computed in double, in relative norm.
double rel_error(const std::vector<float>& c, const std::vector<bf16>& a, const std::vector<bf16>& b, int64_t M,
                 int64_t N, int64_t K) {
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(float(a[i * K + k])) * double(float(b[k * N + j]));
      err2 += (c[i * N + j] - ref) * (c[i * N + j] - ref), ref2 += ref * ref;
    }
  return std::sqrt(err2 / ref2);
}

int main(int argc, char** argv) {
  const bool gpu = argc > 1 && std::string(argv[1]) == "cuda";
  if (gpu && !cuda::available()) {
    std::printf("library: no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const Target target = gpu ? Target::cuda() : Target::host();
  const int n = world_size(), me = rank();
  const int64_t rows = 96, N = 160, K = 128, M = rows * n;  // (this rank's rows of A: 96)
  const double tolerance = 1e-5;
  double gemm_err = 0, ag_err = 0;
  try {
    // readme:begin library
    kernels::Collectives coll(target);
    const float drawn = float(std::random_device{}() >> 8);  // (exact in a float)
    Array<float> seed({me == 0 ? drawn : 0.0f}, gpu);
    coll.all_reduce(seed.data(), seed.data(), 1);  // (in place: every rank gets rank 0's seed)
    const auto s = uint32_t(seed.get()[0]);

    Array<bf16> a(random_matrix(s + me, rows, K), gpu), b(random_matrix(s + 1000, K, N), gpu);
    Array<float> c(std::vector<float>(rows * N), gpu), c_all(std::vector<float>(M * N), gpu);
    kernels::Gemm gemm(target, rows, N, K);  // C = A @ B, this rank's rows
    gemm.run(a.data(), b.data(), c.data());
    kernels::AgGemm ag_gemm(target, M, N, K);  // C_all = all_gather(A) @ B, collective
    ag_gemm.run(a.data(), b.data(), c_all.data());
    // readme:end

    if (me == 0 && float(s) != drawn) throw Error("the all-reduce did not give rank 0 its own seed back");
    gemm_err = rel_error(c.get(), a.host, b.host, rows, N, K);
    std::vector<bf16> a_all;  // every rank's rows, drawn here from its seed
    for (int r = 0; r < n; ++r) {
      std::vector<bf16> shard = random_matrix(s + r, rows, K);
      a_all.insert(a_all.end(), shard.begin(), shard.end());
    }
    ag_err = rel_error(c_all.get(), a_all, b.host, M, N, K);
    barrier_all();
  } catch (const Error& e) {
    std::fprintf(stderr, "library: rank %d: %s\n", me, e.what());
    return 1;
  }
  std::printf(
      "library: rank %d/%d: Gemm %lldx%lldx%lld error %.1e, AgGemm %lldx%lldx%lld error %.1e "
      "(relative norm, tolerance %.0e)\n",
      me, n, (long long)rows, (long long)N, (long long)K, gemm_err, (long long)M, (long long)N, (long long)K, ag_err,
      tolerance);
  return gemm_err <= tolerance && ag_err <= tolerance ? 0 : 1;
}
