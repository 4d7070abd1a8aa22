// The intra-kernel profiler on the CPU backend, run by `tiledist-run -n 2 profile_test` (and
// alone, as a world of one): a distributed kernel with nested regions gives each rank a trace that
// parses as JSON, in which every program's spans nest, in order of time, with the regions the
// kernel marked; tiledist-trace's summary agrees with the spans; the kernel still computes what
// it did. A buffer too small for the records drops the rest and says how many; profiling off
// compiles the marks away (the code is the code of the kernel without them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "jit/trace.h"
#include "runtime/profiler.h"
#include "tiledist.h"

namespace tiledist {
namespace {

using tl::Tensor;
constexpr int kBlock = 64;

// Each program scales its block of x and puts it into the next rank's `out`, signals that rank,
// then waits for the previous rank's signal to its own block.
void ring(tl::Ptr<float> x, tl::Ptr<float> out, tl::Ptr<int32_t> flags) {
  Tensor pid = tl::program_id(0);
  Tensor me = dist::rank();
  Tensor next = (me + 1) % dist::num_ranks();
  tl::profile("compute",
              [&] {
                Tensor offs = pid * kBlock + tl::arange(0, kBlock);
                Tensor v = tl::load(x + offs) * 2.0f;
                tl::profile("put", [&] { tl::store(dist::symm_at(out + offs, next), v); }, {pid, me});
                dist::notify(flags + pid, next, 1);
              },
              {pid});
  tl::profile("wait", [&] { shmem::signal_wait_until(flags + pid, shmem::Cmp::ge, 1); });
  tl::profile_event("done", {pid});
}

// The same kernel without the marks.
void ring_unmarked(tl::Ptr<float> x, tl::Ptr<float> out, tl::Ptr<int32_t> flags) {
  Tensor pid = tl::program_id(0);
  Tensor me = dist::rank();
  Tensor next = (me + 1) % dist::num_ranks();
  Tensor offs = pid * kBlock + tl::arange(0, kBlock);
  Tensor v = tl::load(x + offs) * 2.0f;
  tl::store(dist::symm_at(out + offs, next), v);
  dist::notify(flags + pid, next, 1);
  shmem::signal_wait_until(flags + pid, shmem::Cmp::ge, 1);
}

const KernelDef& ring_def() {
  static const KernelDef def("ring", ring, {"x", "out", "flags"});
  return def;
}

float input(int r, int i) { return float((r * 7919 + i * 104729) % 1000) / 100.0f - 5.0f; }

/// A directory every rank names alike, fresh for this run.
std::string profile_dir(const std::string& what) {
  const char* session = std::getenv("TILEDIST_SESSION");
  const std::string dir = str_cat(std::filesystem::temp_directory_path().string(), "/tiledist-profile-test-", what, "-",
                                  session ? session : std::to_string(::getpid()));
  barrier_all();
  if (rank() == 0) std::filesystem::remove_all(dir);
  barrier_all();
  return dir;
}

/// Each (rank, track)'s spans must nest: sorted by start, each lies inside the innermost open
/// one or starts after it ends. Returns the spans per (rank, track).
std::map<std::pair<int, int64_t>, std::vector<trace::Span>> check_nesting(const trace::Trace& t) {
  std::map<std::pair<int, int64_t>, std::vector<trace::Span>> by_track;
  for (const trace::Span& s : t.spans) by_track[{s.rank, s.track}].push_back(s);
  for (auto& [track, spans] : by_track) {
    std::stable_sort(spans.begin(), spans.end(), [](const trace::Span& a, const trace::Span& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.dur_ns > b.dur_ns;
    });
    std::vector<const trace::Span*> open;
    for (const trace::Span& s : spans) {
      EXPECT_GE(s.dur_ns, 0) << s.name;
      while (!open.empty() && open.back()->end_ns() <= s.start_ns) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.end_ns(), open.back()->end_ns())
            << "rank " << track.first << " track " << track.second << ": '" << s.name << "' overlaps '"
            << open.back()->name << "' without nesting in it";
      }
      open.push_back(&s);
    }
  }
  return by_track;
}

TEST(Profile, ADistributedKernelsNestedRegionsOnEveryRank) {
  const int n = world_size(), me = rank();
  const int programs = 3;
  auto out = symm_alloc<float>(programs * kBlock);
  auto flags = symm_alloc<int32_t>(programs);
  std::fill(flags.begin(), flags.end(), 0);
  std::vector<float> x(programs * kBlock);
  for (int i = 0; i < programs * kBlock; ++i) x[i] = input(me, i);
  const std::string dir = profile_dir("ring");
  CompileOptions options = CompileOptions::from_env();
  options.profile = dir;
  Kernel k = compile(ring_def(), {}, Target::host(), options);
  k.launch({programs}, x, out.data(), flags.data());
  const int prev = (me + n - 1) % n;
  for (int i = 0; i < programs * kBlock; ++i) ASSERT_EQ(out[i], 2.0f * input(prev, i)) << "element " << i;
  barrier_all();

  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(str_cat("rank ", r, "'s trace"));
    const trace::Trace t = trace::read(runtime::trace_path(dir, r));
    ASSERT_EQ(t.launches.size(), 1u);
    EXPECT_EQ(t.launches[0].kernel, "ring");
    EXPECT_EQ(t.launches[0].rank, r);
    EXPECT_EQ(t.launches[0].dropped, 0);
    EXPECT_EQ(t.launches[0].records, programs * 9);  // 4 regions entered and left, an instant
    EXPECT_EQ(t.instants, programs);
    auto by_track = check_nesting(t);
    ASSERT_EQ(by_track.size(), static_cast<size_t>(programs)) << "a track per program";
    for (auto& [track, spans] : by_track) {
      EXPECT_EQ(track.first, r);
      ASSERT_EQ(spans.size(), 4u);
      // The kernel's region holds the others; put is inside compute; wait follows compute.
      EXPECT_EQ(spans[0].name, "ring");
      EXPECT_EQ(spans[1].name, "compute");
      EXPECT_EQ(spans[2].name, "put");
      EXPECT_EQ(spans[3].name, "wait");
      EXPECT_GE(spans[3].start_ns, spans[1].end_ns());
      const int64_t pid = spans[0].program.at(0);
      EXPECT_EQ(spans[1].coords, std::vector<int64_t>{pid});
      EXPECT_EQ(spans[2].coords, (std::vector<int64_t>{pid, r}));
      EXPECT_EQ(t.track_names.at(track), str_cat("program [", pid, ",0,0]"));
    }
    // The summary is the spans' counts and sums.
    for (const trace::RegionStats& s : trace::summarize(t)) {
      int64_t count = 0, total = 0;
      for (const trace::Span& sp : t.spans)
        if (sp.name == s.name) ++count, total += sp.dur_ns;
      EXPECT_EQ(s.count, count) << s.name;
      EXPECT_EQ(s.total_ns, total) << s.name;
      EXPECT_EQ(s.count, programs) << s.name;
      EXPECT_LE(s.p50_ns, s.p99_ns);
      EXPECT_LE(s.p99_ns, s.max_ns);
    }
  }
  // Every rank's trace in one file: the summary sees every rank.
  if (me == 0) {
    std::vector<std::string> files;
    for (int r = 0; r < n; ++r) files.push_back(runtime::trace_path(dir, r));
    trace::merge(files, dir + "/merged.json");
    const trace::Trace all = trace::read(dir + "/merged.json");
    EXPECT_EQ(all.spans.size(), static_cast<size_t>(4 * programs * n));
    for (const trace::RegionStats& s : trace::summarize(all)) EXPECT_EQ(s.ranks.size(), static_cast<size_t>(n));
    EXPECT_NE(trace::summary_text(all).find("wait"), std::string::npos);
  }
  barrier_all();
  symm_free(flags.data());
  symm_free(out.data());
}

void marked_scale(tl::Ptr<float> x, tl::Int n) {
  Tensor offs = tl::program_id(0) * kBlock + tl::arange(0, kBlock);
  tl::profile("scale", [&] {
    Tensor m = offs < n;
    tl::profile_event("loaded");
    tl::store(x + offs, tl::load(x + offs, m) * 3.0f, m);
  });
}
void unmarked_scale(tl::Ptr<float> x, tl::Int n) {
  Tensor offs = tl::program_id(0) * kBlock + tl::arange(0, kBlock);
  Tensor m = offs < n;
  tl::store(x + offs, tl::load(x + offs, m) * 3.0f, m);
}

TEST(Profile, ABufferTooSmallDropsRecordsAndSaysHowMany) {
  const std::string dir = profile_dir("small");
  CompileOptions options = CompileOptions::from_env();
  options.profile = dir;
  Kernel k = compile(KernelDef("marked_scale", marked_scale, {"x", "n"}), {}, Target::host(), options);
  const int programs = 10;
  std::vector<float> x(programs * kBlock);
  for (size_t i = 0; i < x.size(); ++i) x[i] = input(rank(), static_cast<int>(i));
  const std::vector<float> before = x;
  // Three records for each program's five marks (its share of 30): the two regions entered and
  // the instant; the two ends dropped.
  setenv("TILEDIST_PROFILE_RECORDS", "30", 1);
  testing::internal::CaptureStderr();
  k.launch({programs}, x, static_cast<int>(x.size()));
  const std::string said = testing::internal::GetCapturedStderr();
  unsetenv("TILEDIST_PROFILE_RECORDS");
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], before[i] * 3.0f) << "element " << i;
  EXPECT_NE(said.find("20 records dropped (a buffer of 30"), std::string::npos) << said;
  const trace::Trace t = trace::read(runtime::trace_path(dir, rank()));
  ASSERT_EQ(t.launches.size(), 1u);
  EXPECT_EQ(t.launches[0].records, 30);
  EXPECT_EQ(t.launches[0].dropped, 20);
  EXPECT_EQ(t.spans.size(), 0u) << "no region was left in the records kept";
  EXPECT_EQ(t.instants, programs);
  EXPECT_NE(trace::summary_text(t).find("20 records dropped"), std::string::npos);
  // A second launch appends: the file stays one valid trace.
  k.launch({programs}, x, static_cast<int>(x.size()));
  const trace::Trace two = trace::read(runtime::trace_path(dir, rank()));
  ASSERT_EQ(two.launches.size(), 2u);
  EXPECT_EQ(two.launches[1].dropped, 0);
  EXPECT_EQ(two.spans.size(), static_cast<size_t>(2 * programs));
  check_nesting(two);
  // The last launch alone (tiledist-trace --kernel): its marker and its spans.
  const trace::Trace last = trace::last_launch_of(two, "marked_scale");
  ASSERT_EQ(last.launches.size(), 1u);
  EXPECT_EQ(last.launches[0].dropped, 0);
  EXPECT_EQ(last.spans.size(), static_cast<size_t>(2 * programs));
  EXPECT_THROW(trace::last_launch_of(two, "nothing"), Error);
}

TEST(Profile, OffTheMarksCompileToNothing) {
  // The same kernel under one name, with and without marks: the IR, and every target's code,
  // alike.
  const KernelDef marked("scale", marked_scale, {"x", "n"});
  const KernelDef unmarked("scale", unmarked_scale, {"x", "n"});
  const KernelDef ring_plain("ring", ring_unmarked, {"x", "out", "flags"});
  auto emit = [&](const KernelDef& def, const Target& target, jit::Stage stage) {
    return jit::Context::global().emit(def, {}, target, CompileOptions{}, stage);
  };
  for (const Target& target : {Target::host(), Target::cuda("sm_90a"), Target::cuda("sm_80"), Target::amdgcn("gfx942")})
    for (jit::Stage stage : {jit::Stage::tile_ir, jit::Stage::opt_ir, jit::Stage::asm_}) {
      EXPECT_TRUE(emit(marked, target, stage) == emit(unmarked, target, stage)) << target.name() << " " << int(stage);
      EXPECT_TRUE(emit(ring_def(), target, stage) == emit(ring_plain, target, stage))
          << target.name() << " " << int(stage);
    }
  jit::Context& ctx = jit::Context::global();
  CompileOptions off;
  // With profiling on they are there, and the key says so.
  CompileOptions on;
  on.profile = "/nonexistent";
  const std::string ir = ctx.emit(marked, {}, Target::host(), on, jit::Stage::tile_ir);
  EXPECT_NE(ir.find("profile"), std::string::npos) << ir;
  EXPECT_NE(on.key(), off.key());
  // On GPUs a mark reads the clock (and on NVIDIA the SM), and writes its record.
  const std::string ptx = ctx.emit(marked, {}, Target::cuda("sm_90a"), on, jit::Stage::asm_);
  EXPECT_NE(ptx.find("%globaltimer"), std::string::npos);
  EXPECT_NE(ptx.find("%smid"), std::string::npos);
  const std::string amd = ctx.emit(marked, {}, Target::amdgcn("gfx942"), on, jit::Stage::asm_);
  EXPECT_NE(amd.find("s_memrealtime"), std::string::npos);
}

TEST(Profile, MarksTakeIntegerScalarsAndNames) {
  auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CompileOptions on;
  on.profile = "/nonexistent";
  auto bad_args = +[](tl::Ptr<float> x) { tl::profile_event("x", {tl::load(x)}); };
  std::string e = error_of([&] { compile(KernelDef("bad_args", bad_args, {"x"}), {}, Target::host(), on); });
  EXPECT_NE(e.find("its arguments are integer scalars, got f32"), std::string::npos) << e;
  auto three = +[](tl::Ptr<float>) { tl::profile_event("x", {1, 2, 3}); };
  e = error_of([&] { compile(KernelDef("three", three, {"x"}), {}, Target::host(), on); });
  EXPECT_NE(e.find("at most 2 arguments"), std::string::npos) << e;
  auto unnamed = +[](tl::Ptr<float>) { tl::profile("", [] {}); };
  e = error_of([&] { compile(KernelDef("unnamed", unnamed, {"x"}), {}, Target::host(), CompileOptions{}); });
  EXPECT_NE(e.find("a region needs a name"), std::string::npos) << e;
}

}  // namespace
}  // namespace tiledist
