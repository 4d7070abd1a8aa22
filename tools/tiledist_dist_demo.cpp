// The distributed part of `make demo`: a one-shot all-gather and a reduce-scatter written with
// dist::/shmem:: primitives, run as N processes by tiledist-run on the CPU backend, each rank
// checking its result against the inputs it reads from its peers' heaps; then, where there is an
// NVIDIA GPU, the same two kernels on the GPU world (ranks share GPUs where they outnumber them),
// checked against the inputs' formula.
#include <cstdio>

#include "examples/all_gather/all_gather.h"  // (the README's all-gather kernel)
#include "tiledist.h"

namespace {
using namespace tiledist;
using tl::Tensor;

float input(int r, int i) { return float((r * 31 + i * 17) % 101) - 50.0f; }

// Program p pushes our chunk p into rank p's staging row; program 0 then sums the rows it got.
void reduce_scatter(tl::Ptr<float> in, tl::Ptr<float> staging, tl::Ptr<int32_t> flags, tl::Ptr<float> out,
                    tl::Int chunk, tl::Const<int> BLOCK) {
  auto me = dist::rank(), n = dist::num_ranks(), p = tl::program_id(0);
  shmem::putmem_signal_nbi_block(staging + (me * chunk).to(tl::int64), in + (p * chunk).to(tl::int64),
                                 chunk.to(tl::int64) * 4, flags + me, 1, shmem::SIGNAL_SET, p);
  tl::if_then(p == 0, [&] {
    auto rows = dist::consume_token(staging, dist::wait(flags, n));
    tl::for_range(0, chunk, BLOCK, [&](Tensor off) {
      auto o = off + tl::arange(0, BLOCK);
      auto sum = tl::for_range(0, n, 1, tl::zeros({BLOCK}, tl::float32), [&](Tensor s, Tensor acc) {
        return acc + tl::load(rows + s * chunk + o, o < chunk, 0.0f);
      });
      tl::store(out + o, sum, o < chunk);
    });
  });
}

const KernelDef& all_gather_def() {
  static const KernelDef def("all_gather_demo", all_gather, {"buf", "flags", "chunk"});
  return def;
}
const KernelDef& reduce_scatter_def() {
  static const KernelDef def("reduce_scatter_demo", reduce_scatter,
                             {"in", "staging", "flags", "out", "chunk", "BLOCK"});
  return def;
}

// The two kernels again, on the GPU world: the heaps are device memory, mapped on every rank.
int run_on_gpus(int chunk) {
  auto& w = cuda::World::get();
  const int n = w.size(), me = w.rank();
  int bad = 0;
  {
    cuda::SymmBuffer<float> buf(size_t(n) * chunk);
    cuda::SymmBuffer<int32_t> flags(n);
    std::vector<float> mine(size_t(n) * chunk, 0.0f);
    for (int i = 0; i < chunk; ++i) mine[size_t(me) * chunk + i] = input(me, i);
    buf.upload(mine);
    flags.upload(std::vector<int32_t>(n, 0));
    barrier_all();
    compile(all_gather_def(), {}, Target::cuda()).launch({n}, buf, flags, chunk);
    std::vector<float> got = buf.download();
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < chunk; ++i) bad += got[size_t(r) * chunk + i] != input(r, i);
    std::printf("rank %d/%d on GPU %d: all-gather of %d x %d floats: %s\n", me, n, cuda::device().ordinal, n, chunk,
                bad ? "WRONG" : "OK");
    barrier_all();  // no rank frees its buffers while a peer may still put into them
  }
  {
    cuda::SymmBuffer<float> in(size_t(n) * chunk), staging(size_t(n) * chunk), out(chunk);
    cuda::SymmBuffer<int32_t> flags(n);
    std::vector<float> host_in(size_t(n) * chunk);
    for (int i = 0; i < n * chunk; ++i) host_in[i] = input(me, i);
    in.upload(host_in);
    flags.upload(std::vector<int32_t>(n, 0));
    barrier_all();
    compile(reduce_scatter_def(), {{"BLOCK", 1024}}, Target::cuda()).launch({n}, in, staging, flags, out, chunk);
    std::vector<float> got = out.download();
    int wrong = 0;
    for (int i = 0; i < chunk; ++i) {
      float want = 0;  // the inputs are small integers: exact in any order
      for (int r = 0; r < n; ++r) want += input(r, me * chunk + i);
      wrong += got[i] != want;
    }
    std::printf("rank %d/%d on GPU %d: reduce-scatter of %d x %d floats: %s\n", me, n, cuda::device().ordinal, n, chunk,
                wrong ? "WRONG" : "OK");
    bad += wrong;
    barrier_all();
  }
  return bad;
}

}  // namespace

int main() {
  try {
    int n = world_size(), me = rank(), chunk = 100000;
    int bad = 0;
    {
      auto buf = symm_alloc<float>(size_t(n) * chunk);
      auto flags = symm_alloc<int32_t>(n);
      for (int i = 0; i < chunk; ++i) buf[size_t(me) * chunk + i] = input(me, i);
      std::fill(flags.begin(), flags.end(), 0);
      barrier_all();
      compile(all_gather_def(), {}, Target::host()).launch({n}, buf.data(), flags.data(), chunk);
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < chunk; ++i) bad += buf[size_t(r) * chunk + i] != input(r, i);
      std::printf("rank %d/%d: all-gather of %d x %d floats: %s\n", me, n, n, chunk, bad ? "WRONG" : "OK");
    }
    {
      auto in = symm_alloc<float>(size_t(n) * chunk), staging = symm_alloc<float>(size_t(n) * chunk);
      auto flags = symm_alloc<int32_t>(n);
      std::vector<float> out(chunk);
      for (int i = 0; i < n * chunk; ++i) in[i] = input(me, i);
      std::fill(flags.begin(), flags.end(), 0);
      barrier_all();
      compile(reduce_scatter_def(), {{"BLOCK", 1024}}, Target::host())
          .launch({n}, in.data(), staging.data(), flags.data(), out, chunk);
      int wrong = 0;
      for (int i = 0; i < chunk; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += symm_at(in.data(), r)[size_t(me) * chunk + i];
        wrong += out[i] != want;
      }
      std::printf("rank %d/%d: reduce-scatter of %d x %d floats: %s\n", me, n, n, chunk, wrong ? "WRONG" : "OK");
      bad += wrong;
      barrier_all();
    }
    if (cuda::available()) bad += run_on_gpus(chunk);
    return bad ? 1 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
