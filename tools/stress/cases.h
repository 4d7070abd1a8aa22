// The stress harness's cases (tools/tiledist_stress.cpp runs them): every communicating object
// of the kernel library, made at random shapes and run in a random schedule that every rank
// draws from the same seed, each run's result checked against a reference the host computes
// from every rank's inputs (which each rank draws again from their seeds).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tiledist.h"

namespace tiledist::stress {

/// What one job of the harness does: the shared schedule and its checks.
class Job {
 public:
  /// `seed`: the schedule's (the same on every rank); `steps`: the runs of objects to make.
  /// `self_test`: the first result checked is altered first, so the job must fail (a check
  /// of the checks).
  Job(const Target& target, uint64_t seed, int steps, bool self_test = false);
  ~Job();
  /// Runs the schedule; throws Error naming the object, the run and the seed at the first result
  /// that differs from its reference (or any other failure, such as a wait that timed out).
  void run();
  /// Runs of each kind of object, for the summary.
  const std::map<std::string, int>& counts() const { return counts_; }

  // For the subjects (cases.cpp).
  bool gpu() const { return gpu_; }
  const Target& target() const { return target_; }
  int ranks() const { return ranks_; }
  int me() const { return me_; }
  /// Uniform in [lo, hi], from the shared schedule (the same draw on every rank).
  int64_t draw(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  /// A seed for data that every rank can draw again (`what` tells the draws apart).
  uint64_t data_seed(uint64_t what) { return seed_ * 0x9E3779B97F4A7C15ull + what * 0xC2B2AE3D27D4EB4Full + 1; }
  /// No stream (the default stream, waited for), or one of the job's two streams.
  const runtime::Stream* pick_stream();
  /// A check to make once the queued runs are done; it returns what is wrong, or "".
  void after(std::string what, std::function<std::string()> check);
  /// Waits for every queued run, then makes the pending checks.
  void drain();
  void count(const std::string& kind) { ++counts_[kind]; }
  /// A result as the checks get it: in a self test, the first one is altered (by 1000 in its
  /// middle element).
  template <class T>
  void tamper(std::vector<T>& got) {
    if (!self_test_ || got.empty()) return;
    self_test_ = false;
    got[got.size() / 2] = T(float(got[got.size() / 2]) + 1000.0f);
  }

 private:
  Target target_;
  bool gpu_;
  int ranks_, me_;
  uint64_t seed_;
  int steps_;
  bool self_test_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<runtime::Stream>> streams_;
  std::vector<std::pair<std::string, std::function<std::string()>>> pending_;
  std::map<std::string, int> counts_;
};

/// One communicating object under test; each run_once queues one run (or a few, for objects
/// whose calls are small) and leaves its checks with the job.
class Subject {
 public:
  virtual ~Subject() = default;
  virtual void run_once(Job& job) = 0;
  virtual std::string name() const = 0;
};

/// A new object of a random kind and shape.
std::unique_ptr<Subject> make_subject(Job& job, int id);
/// A new MoE object (tools/stress/moe_cases.cpp).
std::unique_ptr<Subject> make_moe_subject(Job& job, int id);
/// A new expert-parallel dispatch and combine (tools/stress/ep_cases.cpp).
std::unique_ptr<Subject> make_ep_subject(Job& job, int id);
/// kernels::DistFlashDecode (decode_cases.cpp).
std::unique_ptr<Subject> make_decode_subject(Job& job, int id);
/// kernels::AgAttention (decode_cases.cpp).
std::unique_ptr<Subject> make_sp_attention_subject(Job& job, int id);
/// model::Model: a small model's prefill and decode steps (model_cases.cpp).
std::unique_ptr<Subject> make_model_subject(Job& job, int id);
/// mega::MegaKernel: a random program of adds and GEMMs as one persistent kernel (mega_cases.cpp).
std::unique_ptr<Subject> make_mega_subject(Job& job, int id);

}  // namespace tiledist::stress
