// Expert-parallel dispatch and combine (kernels/ep.h) timed beside NCCL's all-to-all moving the
// same bytes (PyTorch's all_to_all_single: bench/ep_baseline.py, a process beside each rank, run
// where PyTorch's python is found: $TILEDIST_TORCH_PYTHON, default /opt/torch/.venv/bin/python).
//
//   tiledist-run -n N ep_bench [reps] [pack | WORD]   (the quantize-and-pack row alone, or the
//                                                      rows whose names hold WORD)
//
// Rows: the seed's low-latency shape (128 tokens a rank, hidden 7168, top-8 of 256 experts;
// f8e4m3 rows with their scales, then bf16), and the normal mode at 128 and at 4096 tokens a
// rank (prefill; bf16). Each time is the median of `reps` calls, each after a barrier: the
// dispatch alone, and dispatch then combine ("both"; the combine's time is their difference:
// a combine is the way back of one dispatch). NCCL's columns are its all-to-all of the dispatched
// rows and of the rows back, split sizes known ahead, rows already in order (the transfer
// alone). On one rank (no peers) a last row times the low-latency dispatch's quantize-and-pack
// against a device-to-device copy: bytes read and written a microsecond, ours over the copy's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "bench/timing.h"
#include "kernels/ep.h"
#include "tiledist.h"

using namespace tiledist;

namespace {

/// k distinct uniform picks of E per token.
std::vector<int32_t> uniform_ids(uint32_t seed, int64_t T, int64_t E, int k) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(T * k)), pool(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int j = 0; j < k; ++j) std::swap(pool[size_t(j)], pool[size_t(j + int64_t(rng() % uint32_t(E - j)))]);
    std::copy(pool.begin(), pool.begin() + k, ids.begin() + t * k);
  }
  return ids;
}

/// The median of `reps` calls of `fn` (after 3 untimed), each after a barrier of every rank, ms.
double timed(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  runtime::Timer timer;
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    barrier_all();
    timer.start();
    fn();
    t.push_back(timer.stop());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shape {
  const char* name;
  int tokens, hidden, E, topk;
  bool low_latency;
  ir::DType dtype;
};

struct Times {
  double dispatch = 0, both = 0;
};
Times time_ours(const Target& target, const Shape& m, int reps) {
  const int me = rank();
  const int64_t T = m.tokens, H = m.hidden;
  cuda::Buffer<bf16> x(std::vector<bf16>(size_t(T * H), bf16(0.5f)));
  cuda::Buffer<int32_t> ids(uniform_ids(uint32_t(1234 + me), T, m.E, m.topk));
  cuda::Buffer<float> w(std::vector<float>(size_t(T * m.topk), 0.125f));
  cuda::Buffer<bf16> out(std::vector<bf16>(size_t(T * H)));
  Times times;
  if (m.low_latency) {
    kernels::EpLowLatencyDispatch d(target, T, H, m.E, m.topk, {m.dtype, 64, false});
    kernels::EpLowLatencyCombine c(d);
    cuda::Buffer<bf16> y(std::vector<bf16>(size_t(d.rows() * H)));  // (the GEMM's output, in recv()'s rows)
    times.dispatch = timed([&] { d.run(x.data(), ids.data(), T); }, reps);
    times.both = timed(
        [&] {
          d.run(x.data(), ids.data(), T);
          c.run(y.data(), w.data(), out.data());
        },
        reps);
  } else {
    // (a receive capacity of twice the even share: uniform picks stay far below it)
    kernels::EpDispatch d(target, T, H, m.E, m.topk, {2 * T * m.topk + 1024});
    kernels::EpCombine c(d);
    times.dispatch = timed([&] { d.run(x.data(), ids.data(), T); }, reps);
    times.both = timed(
        [&] {
          d.run(x.data(), ids.data(), T);
          c.run(d.recv(), w.data(), out.data());
        },
        reps);
  }
  return times;
}

/// NCCL's dispatch and combine times (ms) for the shape, or {-1, -1} where it did not run.
std::pair<double, double> time_nccl(const std::string& python, const std::string& script, const Shape& m, int reps,
                                    int port) {
  if (python.empty()) return {-1, -1};
  const std::string env =
      str_cat("RANK=", rank(), " WORLD_SIZE=", world_size(), " MASTER_ADDR=127.0.0.1 MASTER_PORT=", port, " ");
  barrier_all();  // (every rank's torch process starts with the others')
  auto [out, good] = bench::run_command(str_cat(env, python, " ", script, " a2a --tokens ", m.tokens, " --hidden ",
                                                m.hidden, " --experts ", m.E, " --topk ", m.topk,
                                                m.dtype == ir::DType::f8e4m3 ? " --fp8" : "", " --reps ", reps));
  const size_t at = out.rfind("ms ");
  if (!good || at == std::string::npos) {
    if (rank() == 0) std::printf("(torch failed: %s)\n", out.c_str());
    return {-1, -1};
  }
  double d = -1, c = -1;
  std::sscanf(out.c_str() + at + 3, "%lf %lf", &d, &c);
  return {d, c};
}

std::string us(double ms) { return ms < 0 ? "-" : str_cat(std::lround(ms * 1000)); }
std::string ratio(double theirs, double ours) {
  if (theirs < 0 || ours <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", theirs / ours);
  return b;
}

/// The median GPU time of `reps` calls of `fn` queued back to back on `stream` (an event pair
/// around each, `between` after each outside them, one synchronization at the end), ms: what
/// the work takes on the GPU where the host keeps ahead of it, as in a model's layers (the
/// host's launch latency hidden), after 3 untimed calls.
double queued(const runtime::Stream& stream, const std::function<void()>& fn, const std::function<void()>& between,
              int reps) {
  for (int i = 0; i < 3; ++i) fn(), between();
  std::vector<std::unique_ptr<runtime::Event>> ev;
  for (int i = 0; i < 2 * reps; ++i) ev.push_back(std::make_unique<runtime::Event>());
  for (int i = 0; i < reps; ++i) {
    ev[size_t(2 * i)]->record(&stream);
    fn();
    ev[size_t(2 * i + 1)]->record(&stream);
    between();
  }
  ev.back()->synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(ev[size_t(2 * i + 1)]->elapsed_since(*ev[size_t(2 * i)]));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// One rank: the low-latency f8 dispatch's quantize-and-pack against a device copy: the whole
/// dispatch (count, send, receive), and its run() alone with the receive hook (the count and the
/// send, which reads each row once and writes its slots' codes and scales; the receive after the
/// timer), each after a host synchronization (the launches' latency included, as in the other
/// rows), then queued back to back (the GPU's time alone: the bandwidth the goal is stated in).
/// (At 4096 tokens the rows are not split into chunks, and the send takes its slots' places
/// itself: "count and send" is one kernel.)
void pack(const Target& target, int reps) {
  const int64_t T = 4096, H = 7168, E = 8;
  const int k = 2;
  const Shape m{"pack", int(T), int(H), int(E), k, true, ir::DType::f8e4m3};
  const Times t = time_ours(target, m, reps);
  double sent = 0, sent_queued = 0;
  {
    cuda::Buffer<bf16> x(std::vector<bf16>(size_t(T * H), bf16(0.5f)));
    cuda::Buffer<int32_t> ids(uniform_ids(1234, T, E, k));
    kernels::EpLowLatencyDispatch d(target, T, H, E, k, {ir::DType::f8e4m3, 64, true});
    runtime::Timer timer;
    std::vector<double> times;
    for (int i = 0; i < reps + 3; ++i) {
      barrier_all();
      timer.start();
      d.run(x.data(), ids.data(), T);
      const double ms = timer.stop();
      d.receive();
      if (i >= 3) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    sent = times[times.size() / 2];
    // (on a stream of ours: run() without one would wait for each run to end)
    const runtime::Stream stream;
    sent_queued = queued(stream, [&] { d.run(x.data(), ids.data(), T, &stream); }, [&] { d.receive(&stream); }, reps);
  }
  const int64_t scale_blocks = (H + 127) / 128;  // (a f32 scale per 128 channels a row)
  const double written = double(T) * k * double(H + 4 * scale_blocks), read = double(T) * H * 2;
  const size_t bytes = size_t(written);
  void* a = cuda::malloc(bytes);
  void* b = cuda::malloc(bytes);
  const double copy = timed([&] { runtime::copy_async(b, a, bytes, runtime::Stream::legacy()); }, reps);
  const double copy_queued = queued(
      runtime::Stream::legacy(), [&] { runtime::copy_async(b, a, bytes, runtime::Stream::legacy()); }, [] {}, reps);
  cuda::free(a), cuda::free(b);
  auto bw = [&](double ms) { return (read + written) / (ms * 1e-3) / 1e9; };
  const double copy_bw = 2.0 * written / (copy * 1e-3) / 1e9;
  std::printf(
      "\nquantize-and-pack (low-latency f8 dispatch, one rank, %lld tokens, hidden %lld, top-%d of %lld; %.0f MB "
      "read, %.0f MB written): device copy of the bytes written %.1f us, %.0f GB/s read+written\n"
      "  dispatch (count, send, receive) %.1f us, %.0f GB/s, ratio %.2f; count and send alone %.1f us, %.0f GB/s, "
      "ratio %.2f\n",
      (long long)T, (long long)H, k, (long long)E, read / 1e6, written / 1e6, copy * 1e3, copy_bw, t.dispatch * 1e3,
      bw(t.dispatch), bw(t.dispatch) / copy_bw, sent * 1e3, bw(sent), bw(sent) / copy_bw);
  const double copy_queued_bw = 2.0 * written / (copy_queued * 1e-3) / 1e9;
  std::printf(
      "  queued back to back (the GPU's time): device copy %.1f us, %.0f GB/s; count and send %.1f us, %.0f GB/s, "
      "ratio %.2f\n",
      copy_queued * 1e3, copy_queued_bw, sent_queued * 1e3, bw(sent_queued), bw(sent_queued) / copy_queued_bw);
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::available()) {
    std::printf("ep_bench: skipped, no CUDA GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  // (for a profiler: `pack`, the quantize-and-pack row alone, or the rows whose names hold the word)
  const std::string only = argc > 2 ? argv[2] : "";
  const int n = world_size(), me = rank();
  const auto& dev = cuda::device();
  auto [python, script] = bench::find_torch(argv[0], "TILEDIST_EP_BASELINE", "ep_baseline.py");
  const Target target = Target::cuda();
  if (me == 0) {
    std::printf("ep_bench on %s (%s, %d SMs), %d rank(s); median of %d calls, us\n", dev.name.c_str(),
                dev.arch().c_str(), dev.sms, n, reps);
    if (python.empty()) std::printf("(NCCL baseline not run: no PyTorch python, or no bench/ep_baseline.py)\n");
    std::printf("%-22s %6s %6s %4s %4s | %9s %8s %8s | %9s %8s %8s | %8s %8s %8s\n", "shape", "tokens", "hidden", "E",
                "top", "dispatch", "combine", "both", "nccl d", "nccl c", "nccl", "ratio d", "ratio c", "ratio");
  }
  const auto f8 = ir::DType::f8e4m3, b16 = ir::DType::bf16;
  int port = 29711;
  try {
    for (const Shape& m : {Shape{"low latency, f8", 128, 7168, 256, 8, true, f8},
                           Shape{"low latency, bf16", 128, 7168, 256, 8, true, b16},
                           Shape{"normal, bf16", 128, 7168, 256, 8, false, b16},
                           Shape{"normal, bf16 (prefill)", 4096, 7168, 256, 8, false, b16}}) {
      if (m.E % n != 0 || only == "pack" || std::string(m.name).find(only) == std::string::npos) continue;
      const Times t = time_ours(target, m, reps);
      const auto [nd, nc] = time_nccl(python, script, m, reps, ++port);
      const double combine = t.both - t.dispatch;
      if (me == 0)
        std::printf("%-22s %6d %6d %4d %4d | %9s %8s %8s | %9s %8s %8s | %8s %8s %8s\n", m.name, m.tokens, m.hidden,
                    m.E, m.topk, us(t.dispatch).c_str(), us(combine).c_str(), us(t.both).c_str(), us(nd).c_str(),
                    us(nc).c_str(), us(nd < 0 ? -1 : nd + nc).c_str(), ratio(nd, t.dispatch).c_str(),
                    ratio(nc, combine).c_str(), ratio(nd < 0 ? -1 : nd + nc, t.both).c_str());
    }
    if (n == 1 && (only.empty() || only == "pack")) pack(target, reps);
  } catch (const Error& e) {
    std::fprintf(stderr, "ep_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
