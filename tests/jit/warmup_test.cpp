// Ahead-of-time warming: the manifest a job records (merged across processes), warming into a
// cache, and TILEDIST_JIT=off running from the cache or failing at once with the command that
// would warm what is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "jit/manifest.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "temp_dir.h"

namespace tiledist {
namespace {
namespace fs = std::filesystem;

using test_util::TempDir;

/// Sets an environment variable for the scope, then puts back what was there.
struct Env {
  std::string name;
  std::optional<std::string> old;
  Env(const char* n, const std::string& v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    setenv(n, v.c_str(), 1);
  }
  ~Env() { old ? setenv(name.c_str(), old->c_str(), 1) : unsetenv(name.c_str()); }
};

jit::Specialization spec(const std::string& kernel, int block) {
  jit::Specialization s;
  s.kernel = kernel;
  s.target = "sm_90a";
  s.constants = {{"BLOCK", block}};
  s.facts = {ArgFact::aligned16, ArgFact::aligned16, ArgFact::aligned16, ArgFact::one};
  return s;
}

TEST(Manifest, RoundTripsAndMergesAcrossProcesses) {
  TempDir dir;
  std::string path = (dir.path / "m.json").string();
  // Four processes record the same two specializations and one of their own, concurrently.
  std::vector<pid_t> kids;
  for (int p = 0; p < 4; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      try {
        jit::record_specialization(path, spec("add", 1024));
        jit::record_specialization(path, spec("softmax", 256));
        jit::record_specialization(path, spec("add", 64 * (p + 1)));
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto all = jit::read_manifest(path);
  ASSERT_EQ(all.size(), 6u);  // 2 shared + 4 own, no duplicates, nothing lost
  std::set<std::string> seen;
  for (auto& s : all) seen.insert(s.str());
  EXPECT_TRUE(seen.count(spec("add", 1024).str()));
  EXPECT_TRUE(seen.count(spec("add", 256).str()));
  EXPECT_EQ(all[0].facts.size(), 4u);
}

TEST(Manifest, FloatConstantsKeepTheirTypeAndValue) {
  TempDir dir;
  std::string path = (dir.path / "m.json").string();
  jit::Specialization s = spec("layernorm", 256);
  s.constants.insert_or_assign("scale", ConstValue(1.0));
  s.constants.insert_or_assign("eps", ConstValue(1e-5));
  s.constants.insert_or_assign("big", ConstValue(std::numeric_limits<double>::infinity()));
  jit::record_specialization(path, s);
  jit::record_specialization(path, s);  // the same specialization: the manifest stays as it is
  auto all = jit::read_manifest(path);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].str(), s.str());
  EXPECT_TRUE(std::holds_alternative<double>(all[0].constants.at("scale").v));
  EXPECT_EQ(std::get<double>(all[0].constants.at("eps").v), 1e-5);
  EXPECT_TRUE(std::isinf(std::get<double>(all[0].constants.at("big").v)));
}

// Options other than their defaults come back, and key a cache entry of their own.
TEST(Manifest, OptionsRoundTripAndChangeTheKey) {
  TempDir dir;
  std::string path = (dir.path / "m.json").string();
  jit::Specialization s = spec("add", 1024);
  s.options.tma = false;
  s.options.warp_specialize = true;
  s.options.num_stages = 5;
  s.options.lowering = "gpu_ir_ws";
  s.options.world = "nvshmem";  // (a job on the NVSHMEM world warms that world's binaries)
  jit::record_specialization(path, s);
  auto all = jit::read_manifest(path);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].options.tma);
  EXPECT_TRUE(all[0].options.warp_specialize);
  EXPECT_EQ(all[0].options.num_stages, 5);
  EXPECT_EQ(all[0].options.lowering, "gpu_ir_ws");
  EXPECT_EQ(all[0].options.world, "nvshmem");
  EXPECT_EQ(all[0].str(), s.str());
  EXPECT_NE(all[0].warmup_command().find("--warp-specialize"), std::string::npos);
  EXPECT_NE(all[0].warmup_command().find("--lowering gpu_ir_ws --world nvshmem"), std::string::npos);
  CompileOptions plain;
  EXPECT_NE(plain.key(), s.options.key());
  plain.warp_specialize = true;
  EXPECT_NE(plain.key(), CompileOptions().key());
}

TEST(Manifest, BadValuesAreNamed) {
  TempDir dir;
  std::string path = (dir.path / "bad.json").string();
  auto message = [&](const std::string& json) {
    std::ofstream(path) << json;
    try {
      jit::read_manifest(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string head = "{\"specializations\": [{\"kernel\": \"add\", \"target\": \"host\", ";
  EXPECT_NE(message(head + "\"options\": {\"num_warps\": 0}}]}").find("num_warps"), std::string::npos);
  EXPECT_NE(message(head + "\"options\": {\"num_warps\": 3}}]}").find("num_warps"), std::string::npos);
  EXPECT_NE(message(head + "\"options\": {\"num_warps\": \"8\"}}]}").find("num_warps"), std::string::npos);
  EXPECT_NE(message(head + "\"options\": {\"warp_specialize\": 1}}]}").find("warp_specialize"), std::string::npos);
  EXPECT_NE(message(head + "\"options\": {\"world\": 1}}]}").find("\"world\" must be a string"), std::string::npos);
  const std::string world = message(head + "\"options\": {\"world\": \"mpi\"}}]}");
  EXPECT_NE(world.find(": world = 'mpi'"), std::string::npos) << world;
  EXPECT_EQ(world.find("tiledist:", 1), std::string::npos) << "one prefix: " << world;
  EXPECT_NE(message(head + "\"args\": 42}]}").find("args"), std::string::npos);
  EXPECT_NE(message(head + "\"constants\": [1]}]}").find("constants"), std::string::npos);
  EXPECT_NE(message("{\"version\": 99, \"specializations\": []}").find("version 99"), std::string::npos);
}

TEST(Manifest, BadFilesAreNamed) {
  TempDir dir;
  std::string path = (dir.path / "bad.json").string();
  std::ofstream(path) << "{\"specializations\": [{\"kernel\": \"add\"}]}";
  try {
    jit::read_manifest(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("specialization 0"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "not json";
  EXPECT_THROW(jit::read_manifest(path), Error);
  EXPECT_THROW(jit::read_manifest((dir.path / "missing.json").string()), Error);
}

TEST(Warmup, JobRecordsWhatItCompiles) {
  TempDir dir;
  std::string manifest = (dir.path / "job.json").string();
  Env record("TILEDIST_RECORD", manifest);
  jit::Context ctx((dir.path / "cache").string());
  compile(kernels::add_kernel(), {{"BLOCK", 128}}, Target::host(), CompileOptions{}, ctx);
  compile(kernels::softmax_kernel(), {{"BLOCK", 256}}, Target::host(), CompileOptions{}, ctx);
  auto all = jit::read_manifest(manifest);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].kernel, "add");
  EXPECT_EQ(all[0].target, "host");
  EXPECT_EQ(std::get<int64_t>(all[0].constants.at("BLOCK").v), 128);
}

TEST(Warmup, JitOffRunsFromAWarmCacheAndNamesWhatIsMissing) {
  TempDir dir;
  std::string cache = (dir.path / "cache").string();
  Env off("TILEDIST_JIT", "off");
  {
    jit::Context cold(cache);
    try {
      compile(kernels::add_kernel(), {{"BLOCK", 64}}, Target::host(), CompileOptions{}, cold);
      FAIL() << "compiled with TILEDIST_JIT=off";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("kernel 'add'"), std::string::npos) << m;
      EXPECT_NE(m.find("BLOCK=64"), std::string::npos) << m;
      EXPECT_NE(m.find("tiledist-warmup --target host --kernels add --const BLOCK=64"), std::string::npos) << m;
    }
  }
  // Warming is allowed with the JIT off (it is the compiler); then the job runs.
  jit::Context warmer(cache);
  EXPECT_TRUE(warmer.warm(kernels::add_kernel(), {{"BLOCK", 64}}, Target::host(), CompileOptions{}));
  EXPECT_FALSE(warmer.warm(kernels::add_kernel(), {{"BLOCK", 64}}, Target::host(), CompileOptions{}));  // cached now
  jit::Context job(cache);
  int n = 1000;
  auto x = reference::random_floats(n), y = reference::random_floats(n);
  std::vector<float> out(n), want;
  compile(kernels::add_kernel(), {{"BLOCK", 64}}, Target::host(), CompileOptions{}, job)
      .launch({tl::cdiv(n, 64)}, x, y, out, n);
  reference::add(x, y, want);
  EXPECT_EQ(reference::rel_error(out, want), 0.0);
  EXPECT_EQ(job.stats().compiles, 0);
  EXPECT_EQ(job.stats().disk_hits, 1);
}

TEST(Warmup, GpuVariantsWarmOnAMachineWithoutAGpu) {  // NVIDIA and AMD alike
  TempDir dir;
  jit::Context ctx((dir.path / "cache").string());
  ArgFacts aligned(6, ArgFact::aligned16);
  EXPECT_TRUE(ctx.warm(kernels::gemm_kernel(ir::DType::bf16), {}, Target::cuda("sm_90a"), CompileOptions{}, aligned));
  EXPECT_TRUE(ctx.warm(kernels::gemm_kernel(ir::DType::bf16), {}, Target::cuda("sm_80"), CompileOptions{}, aligned));
  EXPECT_TRUE(ctx.warm(kernels::gemm_kernel(ir::DType::bf16), {}, Target::amdgcn("gfx942"), CompileOptions{}, aligned));
  EXPECT_TRUE(ctx.warm(kernels::gemm_kernel(ir::DType::bf16), {}, Target::amdgcn("gfx90a"), CompileOptions{}, aligned));
  EXPECT_FALSE(
      ctx.warm(kernels::gemm_kernel(ir::DType::bf16), {}, Target::amdgcn("gfx942"), CompileOptions{}, aligned));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "cache"), fs::directory_iterator()), 4);
}

}  // namespace
}  // namespace tiledist
