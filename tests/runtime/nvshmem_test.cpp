// runtime/nvshmem.h on any machine (issue 31): which GPU world $TILEDIST_WORLD asks for, and
// where NVSHMEM's host and device libraries are looked for, with errors that name every place
// looked in. Where NVSHMEM is installed (the GPU machine), its library loads with every entry
// point the NVSHMEM world calls.
#include "runtime/nvshmem.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "jit/nvshmem_link.h"
#include "kernels/kernels.h"
#include "runtime/cuda_world.h"
#include "tests/jit/error_of.h"
#include "tests/jit/saved_env.h"
#include "tests/jit/temp_dir.h"
#include "tiledist.h"

namespace tiledist {
namespace {
using test_util::error_of;

// A file `name` in `dir` holding `text`.
void write(const test_util::TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.path / name) << text;
}

// Keeps the variables that steer the search as they were, unset for the test.
struct SavedEnv : test_util::SavedEnv {
  SavedEnv()
      : test_util::SavedEnv({"TILEDIST_WORLD", "TILEDIST_NVSHMEM", "NVSHMEM_HOME", "NVSHMEM_LIBDEVICE_PATH"}, true) {}
};

TEST(Nvshmem, TheWorldIsCudaUnlessAskedOtherwise) {
  SavedEnv keep;
  EXPECT_EQ(nvshmem::world_kind(), nvshmem::WorldKind::cuda);
  setenv("TILEDIST_WORLD", "nvshmem", 1);
  EXPECT_EQ(nvshmem::world_kind(), nvshmem::WorldKind::nvshmem);
  setenv("TILEDIST_WORLD", "cuda", 1);
  EXPECT_EQ(nvshmem::world_kind(), nvshmem::WorldKind::cuda);
  setenv("TILEDIST_WORLD", "mpi", 1);
  EXPECT_EQ(error_of([] { nvshmem::world_kind(); }),
            "tiledist: $TILEDIST_WORLD = 'mpi' is not a GPU world (cuda or nvshmem)");
}

TEST(Nvshmem, TheSearchStartsWhereTheUserSays) {
  SavedEnv keep;
  test_util::TempDir scratch;
  const std::string dir = scratch.path.string();
  setenv("TILEDIST_NVSHMEM", dir.c_str(), 1);
  setenv("NVSHMEM_HOME", "/somewhere/nvshmem", 1);
  auto places = nvshmem::search_paths();
  ASSERT_GE(places.size(), 3u);
  EXPECT_EQ(places[0], dir);
  EXPECT_EQ(places[1], "/somewhere/nvshmem/lib");
}

// Not found: the error names each place looked in. Where NVSHMEM is installed, it loads instead
// (from one of those places or the loader's path), with every entry point bound.
TEST(Nvshmem, NotFoundNamesEveryPlaceLookedIn) {
  SavedEnv keep;
  test_util::TempDir scratch;
  const std::string dir = scratch.path.string();
  setenv("TILEDIST_NVSHMEM", dir.c_str(), 1);
  const std::string error = error_of([] { nvshmem::load_library(); });
  if (error.empty()) {
    nvshmem::Library lib = nvshmem::load_library();
    EXPECT_EQ(lib.path.find(dir), std::string::npos);
    EXPECT_NE(lib.hostlib_init_attr, nullptr);
    EXPECT_NE(lib.cumodule_init, nullptr);
    GTEST_SKIP() << "NVSHMEM is installed here: " << lib.path;
  }
  EXPECT_NE(error.find("tiledist: NVSHMEM not found: no libnvshmem_host.so.3 in " + dir + ", "), std::string::npos)
      << error;
  EXPECT_NE(error.find("/usr/local/nvshmem/lib"), std::string::npos) << error;
  EXPECT_NE(error.find("set $TILEDIST_NVSHMEM"), std::string::npos) << error;
}

TEST(Nvshmem, ALibraryThatDoesNotLoadIsNamed) {
  SavedEnv keep;
  test_util::TempDir scratch;
  const std::string dir = scratch.path.string();
  write(scratch, "libnvshmem_host.so.3", "not a shared library");
  setenv("TILEDIST_NVSHMEM", dir.c_str(), 1);
  const std::string error = error_of([] { nvshmem::load_library(); });
  EXPECT_NE(error.find("NVSHMEM's " + dir + "/libnvshmem_host.so.3 was found but does not load"), std::string::npos)
      << error;
}

TEST(Nvshmem, TheDeviceLibraryIsFoundBesideTheHostOne) {
  SavedEnv keep;
  test_util::TempDir scratch;
  const std::string dir = scratch.path.string();
  setenv("TILEDIST_NVSHMEM", dir.c_str(), 1);
  const std::string none = error_of([] { nvshmem::device_bitcode(); });
  if (none.empty()) GTEST_SKIP() << "NVSHMEM is installed here: " << nvshmem::device_bitcode();
  EXPECT_NE(none.find("device library not found: no libnvshmem_device.bc in " + dir + ", "), std::string::npos) << none;
  write(scratch, "libnvshmem_device.bc", "");
  EXPECT_EQ(nvshmem::device_bitcode(), dir + "/libnvshmem_device.bc");
  setenv("NVSHMEM_LIBDEVICE_PATH", "/no/such/libnvshmem_device.bc", 1);
  EXPECT_EQ(error_of([] { nvshmem::device_bitcode(); }),
            "tiledist: $NVSHMEM_LIBDEVICE_PATH = '/no/such/libnvshmem_device.bc' is not a file");
}

// A kernel compiled for the NVSHMEM world is cached under a key that holds NVSHMEM's device
// library, by path and contents: another NVSHMEM, another key. The CUDA world's holds nothing.
TEST(Nvshmem, TheCacheKeyHoldsTheDeviceLibrary) {
  SavedEnv keep;
  test_util::TempDir scratch;
  const std::string dir = scratch.path.string();
  EXPECT_EQ(jit::nvshmem_key(""), "");
  write(scratch, "a.bc", "one NVSHMEM");
  write(scratch, "b.bc", "another NVSHMEM");
  setenv("NVSHMEM_LIBDEVICE_PATH", (dir + "/a.bc").c_str(), 1);
  const std::string a = jit::nvshmem_key("nvshmem");
  EXPECT_NE(a.find(dir + "/a.bc"), std::string::npos) << a;
  EXPECT_EQ(jit::nvshmem_key("nvshmem"), a);
  setenv("NVSHMEM_LIBDEVICE_PATH", (dir + "/b.bc").c_str(), 1);
  const std::string b = jit::nvshmem_key("nvshmem");
  EXPECT_NE(b, a);
  EXPECT_NE(b.substr(b.find(' ')), a.substr(a.find(' '))) << "the contents' hashes";
  setenv("NVSHMEM_LIBDEVICE_PATH", "/no/such.bc", 1);
  EXPECT_NE(jit::nvshmem_key("nvshmem").find("none (tiledist: $NVSHMEM_LIBDEVICE_PATH"), std::string::npos);
  // ... and the cache uses it: warming a kernel for the NVSHMEM world compiles it again for
  // another device library (sm_90a's PTX: no GPU needed).
  jit::Context ctx(dir + "/cache");
  CompileOptions options;
  options.world = "nvshmem";
  auto warm = [&](const std::string& library) {
    setenv("NVSHMEM_LIBDEVICE_PATH", (dir + "/" + library).c_str(), 1);
    return ctx.warm(kernels::add_kernel(), {{"BLOCK", 128}}, Target::cuda("sm_90a"), options);
  };
  EXPECT_TRUE(warm("a.bc"));
  EXPECT_FALSE(warm("a.bc")) << "the same library: cached";
  EXPECT_TRUE(warm("b.bc")) << "another library: another key";
}

// $TILEDIST_WORLD=nvshmem: the GPU world's heaps from NVSHMEM. Without NVSHMEM (CI) the world
// says so; on the GPU machine the world is made, its heap is NVSHMEM's and a buffer in it
// round-trips.
TEST(Nvshmem, TheGpuWorldsHeapComesFromNvshmem) {
  SavedEnv keep;
  setenv("TILEDIST_WORLD", "nvshmem", 1);
  const std::string error = error_of([] { cuda::World::get(); });
  if (!error.empty()) {
    EXPECT_TRUE(error.find("NVSHMEM not found") != std::string::npos ||
                error.find("CUDA is not available") != std::string::npos)
        << error;
    return;
  }
  cuda::World& w = cuda::World::get();
  EXPECT_EQ(w.size(), world_size());
  EXPECT_EQ(w.rank(), rank());
  EXPECT_EQ(nvshmem::library().my_pe(), rank());
  EXPECT_TRUE(nvshmem::initialized());
  cuda::SymmBuffer<float> buf(1000);
  EXPECT_EQ(buf.at(rank()), buf.data());
  EXPECT_EQ(nvshmem::library().ptr(buf.data(), rank()), buf.data());  // (NVSHMEM's heap, not ours)
  std::vector<float> in(1000);
  for (int i = 0; i < 1000; ++i) in[i] = float(i * 3 + rank());
  buf.upload(in);
  EXPECT_EQ(buf.download(), in);
}

// Each program's block of `src` put into `dst` on the next rank, by NVSHMEM's block put.
void put_next(tl::Ptr<float> src, tl::Ptr<float> dst, tl::Int n, tl::Const<int> BLOCK) {
  auto start = tl::program_id(0) * BLOCK;
  auto bytes = (tl::minimum(n - start, BLOCK) * 4).to(tl::int64);
  shmem::putmem_block(dst + start.to(tl::int64), src + start.to(tl::int64), bytes,
                      (dist::rank() + 1) % dist::num_ranks());
}
// Each program's block of `src` on the next rank read into `out` here, by NVSHMEM's block get.
void get_next(tl::Ptr<float> src, tl::Ptr<float> out, tl::Int n, tl::Const<int> BLOCK) {
  auto start = tl::program_id(0) * BLOCK;
  auto bytes = (tl::minimum(n - start, BLOCK) * 4).to(tl::int64);
  shmem::getmem_block(out + start.to(tl::int64), src + start.to(tl::int64), bytes,
                      (dist::rank() + 1) % dist::num_ranks());
}

// On the NVSHMEM world a kernel's copies to and from peers are NVSHMEM's device functions,
// linked from its bitcode (the PTX holds its device state) into a module NVSHMEM initialised:
// a put to the next rank and a get from it move every element (ragged blocks; on one rank, to
// and from itself). Skipped without NVSHMEM or a GPU.
TEST(Nvshmem, PutsAndGetsAreNvshmemsOwn) {
  SavedEnv keep;
  setenv("TILEDIST_WORLD", "nvshmem", 1);
  const std::string error = error_of([] { cuda::World::get(); });
  if (!error.empty()) GTEST_SKIP() << error;
  const int n = 100003, block = 4096, programs = (n + block - 1) / block;
  const KernelDef put("nvshmem_put_next", put_next, {"src", "dst", "n", "BLOCK"});
  const KernelDef get("nvshmem_get_next", get_next, {"src", "out", "n", "BLOCK"});
  const CompileOptions options = CompileOptions::from_env();
  ASSERT_EQ(options.world, "nvshmem");
  const std::string ptx =
      jit::Context::global().emit(put, {{"BLOCK", block}}, Target::cuda(), options, jit::Stage::binary);
  EXPECT_NE(ptx.find("nvshmemi_device_state_d"), std::string::npos) << "NVSHMEM's device library is not linked";
  auto inputs = [&](int r) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[size_t(i)] = float(i % 1009) + 1000.0f * float(r);
    return v;
  };
  cuda::SymmBuffer<float> src(n), dst(n);
  cuda::Buffer<float> out(n);
  src.upload(inputs(rank()));
  cuda::memset(dst.data(), 0, size_t(n) * 4);
  barrier_all();
  compile(put, {{"BLOCK", block}}, Target::cuda(), options).launch({programs}, src, dst, n);
  cuda::synchronize();
  barrier_all();
  const int prev = (rank() + world_size() - 1) % world_size(), next = (rank() + 1) % world_size();
  EXPECT_EQ(dst.download(), inputs(prev)) << "the put from rank " << prev;
  compile(get, {{"BLOCK", block}}, Target::cuda(), options).launch({programs}, src, out, n);
  cuda::synchronize();
  EXPECT_EQ(out.download(), inputs(next)) << "the get from rank " << next;
  barrier_all();
}

// A kernel that calls what NVSHMEM's device library lacks fails to compile, naming the function
// and the library (the driver's link of the PTX would fail later, less clearly). The library
// here is a fixture that defines nvshmem_quiet alone.
TEST(Nvshmem, AFunctionTheDeviceLibraryLacksIsNamed) {
  SavedEnv keep;
  if (!std::ifstream(NVSHMEM_FIXTURE)) GTEST_SKIP() << "no " << NVSHMEM_FIXTURE << " here (a bundle)";
  setenv("NVSHMEM_LIBDEVICE_PATH", NVSHMEM_FIXTURE, 1);
  CompileOptions options;
  options.world = "nvshmem";
  const KernelDef put("nvshmem_put_next", put_next, {"src", "dst", "n", "BLOCK"});
  const std::string e = error_of(
      [&] { jit::Context::global().emit(put, {{"BLOCK", 4096}}, Target::cuda("sm_90a"), options, jit::Stage::asm_); });
  EXPECT_NE(e.find(str_cat("calls nvshmemx_putmem_block, which NVSHMEM's device library ", NVSHMEM_FIXTURE,
                           " does not define")),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace tiledist
