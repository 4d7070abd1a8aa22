// The compile cache: a second process finds an entry without compiling; a truncated,
// corrupted or foreign entry is recompiled, never trusted; concurrent writers never leave a
// half-written entry. Compiles are counted, not timed.
#include "jit/cache.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>

#include "kernels/kernels.h"
#include "temp_dir.h"

namespace tiledist {
namespace {
namespace fs = std::filesystem;
using jit::Artifact;

using test_util::TempDir;

/// The probe beside this test binary (a moved build, the bundle), else where the build put it.
std::string probe_program() {
  fs::path beside = fs::read_symlink("/proc/self/exe").parent_path() / "cache_probe";
  return fs::exists(beside) ? beside.string() : std::string(CACHE_PROBE);
}

std::string probe(const fs::path& dir) {
  std::string cmd = probe_program() + " " + dir.string();
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  char buf[256] = {0};
  std::string out;
  while (fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(pclose(p), 0) << out;
  return out;
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> v;
  for (auto& e : fs::directory_iterator(dir)) v.push_back(e.path());
  return v;
}

TEST(Cache, SecondProcessFindsTheEntryWithoutCompiling) {
  TempDir dir;
  EXPECT_EQ(probe(dir.path), "compiles=1 disk_hits=0 disk_rejects=0 ok=1\n");
  EXPECT_EQ(probe(dir.path), "compiles=0 disk_hits=1 disk_rejects=0 ok=1\n");
  ASSERT_EQ(entries(dir.path).size(), 1u);  // one entry, no temporary files left behind
  EXPECT_EQ(entries(dir.path)[0].extension(), ".tdk");
}

void damage_and_expect_recompile(const std::function<void(const fs::path&)>& damage) {
  TempDir dir;
  probe(dir.path);
  fs::path entry = entries(dir.path).at(0);
  damage(entry);
  EXPECT_EQ(probe(dir.path), "compiles=1 disk_hits=0 disk_rejects=1 ok=1\n");
  EXPECT_EQ(probe(dir.path), "compiles=0 disk_hits=1 disk_rejects=0 ok=1\n");  // rewritten whole
}

TEST(Cache, TruncatedEntryIsRecompiled) {
  damage_and_expect_recompile([](const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); });
  damage_and_expect_recompile([](const fs::path& p) { fs::resize_file(p, 10); });
  damage_and_expect_recompile([](const fs::path& p) { fs::resize_file(p, 0); });
}

TEST(Cache, CorruptPayloadIsRecompiled) {
  damage_and_expect_recompile([](const fs::path& p) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c;
    f.get(c);
    f.seekp(-100, std::ios::end);
    f.put(static_cast<char>(c ^ 0x5A));
  });
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

TEST(Cache, ForeignEntryUnderTheKeyIsRecompiled) {
  // A complete, self-consistent entry written for another key (a copied or renamed file).
  damage_and_expect_recompile([](const fs::path& p) {
    Artifact a;
    std::string key = p.stem().string();
    ASSERT_EQ(jit::read_cache_entry(p.parent_path().string(), key, a), jit::CacheRead::hit);
    a.key = std::string(key.size(), '0');
    jit::write_cache_entry(p.parent_path().string(), a);
    fs::rename(jit::cache_entry_path(p.parent_path().string(), a.key), p);
  });
}

TEST(Cache, DamagedHeaderFieldIsRecompiled) {
  // The scratch size is in the header: a wrong one would let the kernel write past its memory.
  damage_and_expect_recompile([](const fs::path& p) {
    std::string s = read_all(p);
    size_t at = s.find("\nscratch ") + 9;
    s[at] = s[at] == '1' ? '2' : '1';
    write_all(p, s);
  });
}

// A GPU entry carries the TMA tensor maps its kernel takes; the launch builds them from this
// field, so one that does not parse makes the entry corrupt (recompiled, never guessed at).
TEST(Cache, TensorMapRecipesRoundTripAndBadOnesAreCorrupt) {
  runtime::TmaRecipe r;
  r.pointer = 0;
  r.dtype = ir::DType::bf16;
  r.dims = {runtime::TmaRecipe::Dim::param(5), runtime::TmaRecipe::Dim::param(3)};
  r.strides = {runtime::TmaRecipe::Dim::of(4096)};
  r.box = {64, 128};
  EXPECT_EQ(r.str(), "0 bf16 p5,p3 4096 64,128");
  runtime::TmaRecipe b = r;
  b.pointer = 1, b.box = {64, 64, 1};
  b.dims.push_back(runtime::TmaRecipe::Dim::of(runtime::TmaRecipe::kUnbounded));
  b.strides.push_back(runtime::TmaRecipe::Dim{{3, 5}, 2});
  EXPECT_EQ(b.str(), "1 bf16 p5,p3,2147483647 4096,p3*p5*2 64,64,1");
  auto both = runtime::parse_tma_recipes(runtime::tma_recipes_str({r, b}));
  ASSERT_TRUE(both);
  EXPECT_EQ(*both, (std::vector<runtime::TmaRecipe>{r, b}));
  EXPECT_EQ(runtime::parse_tma_recipes("")->size(), 0u);
  for (const char* bad :
       {"0 bf16 p5,p3", "0 bf16 p5,p3 4096 64,128 9", "p0 bf16 p5,p3 4096 64,128", "0 b16 p5,p3 4096 64,128",
        "0 bf16 p5,q3 4096 64,128", "0 bf16 p5,p3 4096 64,512", "0 bf16 p5,p3 -4 64,128", "0 bf16 p5,p3 4096 64,128;",
        "0 bf16 p5 p3 4096 64 128", "0 bf16 p5,p3 4096,4096 64,128", "0 bf16 p5,p3 4096 64", "0 bf16 p5,p3 2*p4 64,128",
        "0 bf16 p5,p3 p4** 64,128"})
    EXPECT_FALSE(runtime::parse_tma_recipes(bad)) << bad;

  TempDir dir;
  Artifact a;
  a.key = "k1", a.kernel = "gemm", a.target = "sm_90a", a.entry = "gemm", a.threads = 256, a.binary = "// ptx";
  a.tma = runtime::tma_recipes_str({r, b});
  jit::write_cache_entry(dir.path.string(), a);
  Artifact back;
  ASSERT_EQ(jit::read_cache_entry(dir.path.string(), "k1", back), jit::CacheRead::hit);
  EXPECT_EQ(back.tma, a.tma);
  a.key = "k2", a.tma = "0 bf16 p5 p3 4096 64 999";
  jit::write_cache_entry(dir.path.string(), a);  // (a valid checksum over a field that does not parse)
  EXPECT_EQ(jit::read_cache_entry(dir.path.string(), "k2", back), jit::CacheRead::corrupt);
}

TEST(Cache, ConcurrentProcessesShareOneEntry) {
  TempDir dir;
  std::vector<std::future<std::string>> runs;
  for (int i = 0; i < 4; ++i) runs.push_back(std::async(std::launch::async, [&] { return probe(dir.path); }));
  for (auto& r : runs) EXPECT_NE(r.get().find("ok=1"), std::string::npos);
  ASSERT_EQ(entries(dir.path).size(), 1u);
  EXPECT_EQ(probe(dir.path), "compiles=0 disk_hits=1 disk_rejects=0 ok=1\n");
}

TEST(Cache, MemoryHitsSkipTracingAndDistinctConstantsGetDistinctEntries) {
  TempDir dir;
  jit::Context ctx(dir.path.string());
  const KernelDef& add = kernels::add_kernel();
  compile(add, {{"BLOCK", 64}}, Target::host(), {}, ctx);
  compile(add, {{"BLOCK", 64}}, Target::host(), {}, ctx);
  compile(add, {{"BLOCK", 128}}, Target::host(), {}, ctx);
  auto s = ctx.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.memory_hits, 1);
  EXPECT_EQ(entries(dir.path).size(), 2u);
  // Options are part of the key too.
  CompileOptions checked;
  checked.check_bounds = true;
  compile(add, {{"BLOCK", 64}}, Target::host(), checked, ctx);
  EXPECT_EQ(ctx.stats().compiles, 3);
}

TEST(Cache, UnwritableDirectoryStillRuns) {
  jit::Context ctx("/proc/tiledist-cannot-write-here");
  std::vector<float> x(10, 1), y(10, 2), out(10);
  compile(kernels::add_kernel(), {{"BLOCK", 16}}, Target::host(), {}, ctx).launch({1}, x, y, out, 10);
  for (float v : out) EXPECT_EQ(v, 3.0f);
}

}  // namespace
}  // namespace tiledist

namespace tiledist {
namespace {
TEST(Cache, KeysChangeWithEveryBuildOfTheCompiler) {
  // The library's build-id is in every key: entries from an older build are never used.
  std::string v = jit::compiler_version();
  size_t at = v.find(" build ");
  ASSERT_NE(at, std::string::npos) << v;
  std::string id = v.substr(at + 7);
  EXPECT_EQ(id.size(), 40u) << v;
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << v;
}
}  // namespace
}  // namespace tiledist
