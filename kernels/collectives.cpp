// One-shot collectives through a symmetric staging area, on the host world (CPU) or the GPU
// world alike. Programs form a grid (P, ranks): program (b, p) pushes slice b of what rank p
// needs into rank p's staging row for this rank (putmem + a counting signal; to itself only the
// signal), then waits until every rank's P slices have arrived and finishes part p of slice b
// locally: copying the rows (all-gather) or summing them in rank order (reduce-scatter,
// all-reduce: the same order on every rank, so every rank gets the same bits), its own row read
// from its input. The two-shot all-reduce is a reduce-scatter and an all-gather of the sums.
//
// Reuse without a barrier: calls alternate between two staging halves, and signal words only
// grow (a call waits until each holds the number of slices every call so far has sent). A rank writes a peer's half of call k+1 only after it has
// received that peer's pushes of call k, which the peer made after finishing call k-1, the
// last reader of that half.
#include "kernels/kernels.h"
#include "kernels/symmetric.h"

namespace tiledist::kernels {

namespace {
using tl::Tensor;

void push_collective(tl::Ptr<float> in, tl::Ptr<float> staging, tl::Ptr<int64_t> flags, tl::Ptr<float> out,
                     tl::Int count, tl::Int in_stride, tl::Int out_stride, tl::Int64 arrived, tl::Const<int> BLOCK,
                     tl::Const<int> REDUCE) {
  auto me = dist::rank(), n = dist::num_ranks();
  auto b = tl::program_id(0), nb = tl::num_programs(0), p = tl::program_id(1);
  auto per = ((count + nb - 1) / nb + 3) / 4 * 4;  // 16-byte slices
  auto lo = b * per;
  auto len = tl::maximum(tl::minimum(count - lo, per), 0);
  auto bytes = tl::where(p == me, 0, len).to(tl::int64) * 4;
  shmem::putmem_signal_nbi_block(staging + (me * count + lo).to(tl::int64), in + (p * in_stride + lo).to(tl::int64),
                                 bytes, flags + me, tl::scalar(1, tl::int64), shmem::SIGNAL_ADD, p);
  // Then every program finishes its share of slice b: part p of it.
  auto part = ((len + n - 1) / n + 3) / 4 * 4;
  auto first = lo + p * part;
  auto end = tl::minimum(first + part, lo + len);
  tl::if_then(first < end, [&] {
    auto token = tl::for_range(0, n, 1, tl::scalar(0, tl::int64), [&](Tensor r, Tensor) {
      return shmem::signal_wait_until(flags + r, shmem::Cmp::ge, arrived);
    });
    auto rows = dist::consume_token(staging, token);
    auto own = in + (me * in_stride).to(tl::int64);
    tl::for_range(first, end, BLOCK, [&](Tensor off) {
      auto o = off + tl::arange(0, BLOCK);
      auto m = o < end;
      // Rank r's elements: from its staging row, or from the input for this rank's own.
      auto row = [&](const Tensor& r) {
        auto mine = r == me;
        return tl::where(mine, tl::load(own + o, m & mine, 0.0f), tl::load(rows + (r * count).to(tl::int64) + o, m & !mine, 0.0f));
      };
      if (REDUCE) {
        auto sum = tl::for_range(0, n, 1, tl::zeros({BLOCK}, tl::float32), [&](Tensor r, Tensor acc) { return acc + row(r); });
        tl::store(out + o, sum, m);
      } else {
        tl::for_range(0, n, 1, [&](Tensor r) { tl::store(out + (r * out_stride).to(tl::int64) + o, row(r), m); });
      }
    });
  });
}

const std::vector<std::string> kParams = {"in",    "staging", "flags", "out",   "count",
                                          "in_stride", "out_stride", "arrived", "BLOCK", "REDUCE"};
}  // namespace

const KernelDef& all_gather_kernel() {
  static const KernelDef def =
      KernelDef("all_gather", push_collective, kParams, {{"BLOCK", 1024}, {"REDUCE", 0}}).do_not_specialize({"arrived"});
  return def;
}
const KernelDef& reduce_scatter_kernel() {
  static const KernelDef def =
      KernelDef("reduce_scatter", push_collective, kParams, {{"BLOCK", 1024}, {"REDUCE", 1}}).do_not_specialize({"arrived"});
  return def;
}
const KernelDef& all_reduce_kernel() {
  static const KernelDef def =
      KernelDef("all_reduce", push_collective, kParams, {{"BLOCK", 1024}, {"REDUCE", 1}}).do_not_specialize({"arrived"});
  return def;
}
TILEDIST_REGISTER(all_gather_kernel());
TILEDIST_REGISTER(reduce_scatter_kernel());
TILEDIST_REGISTER(all_reduce_kernel());

struct Collectives::State {
  Target target;
  int ranks = 1;
  size_t capacity = 0;  // elements per rank row of a staging half
  float* staging = nullptr;
  int64_t* flags = nullptr;  // flags[r]: slices rank r has sent us, over all calls
  int64_t calls = 0, slices = 0;  // slices: what each flag holds once the current call has arrived
  int programs = 1;  // per destination rank
  Kernel gather, reduce;
};

Collectives::Collectives(const Target& target, size_t capacity_bytes) : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.target = target;
  const bool gpu = detail::on_gpu(target);
  s.ranks = detail::world_ranks(target);
  s.capacity = std::max<size_t>(capacity_bytes / 4 / 2 / s.ranks / 4 * 4, 4);
  s.staging = static_cast<float*>(detail::symm_zeroed(target, 2 * s.ranks * s.capacity * 4));
  s.flags = static_cast<int64_t*>(detail::symm_zeroed(target, s.ranks * 8));
  s.programs = gpu ? std::max(1, cuda::device().sms / s.ranks) : 2;
  barrier_all();  // no rank signals before every rank has zeroed its flags
  CompileOptions options = CompileOptions::from_env();
  if (gpu) options.num_warps = 16;  // more bytes in flight per program
  s.gather = compile(all_gather_kernel(), {}, target, options);
  s.reduce = compile(reduce_scatter_kernel(), {}, target, options);
}

Collectives::~Collectives() {
  detail::symm_release(s_->target, s_->flags);
  detail::symm_release(s_->target, s_->staging);
}

int Collectives::ranks() const { return s_->ranks; }

void Collectives::run(bool reduce, const float* in, float* out, size_t count, size_t in_stride, size_t out_stride) {
  State& s = *s_;
  const bool gpu = s.target.kind == Target::Kind::nvptx;
  for (size_t done = 0; done < count; done += s.capacity) {
    const size_t piece = std::min(s.capacity, count - done);
    float* half = s.staging + (++s.calls % 2) * s.ranks * s.capacity;
    // Programs per destination: about 16 KiB each, up to the device's share.
    int programs = static_cast<int>(std::clamp<size_t>((piece * 4 + 16383) / 16384, 1, size_t(s.programs)));
    s.slices += programs;
    const float* src = in + done;
    float* dst = out + done;
    auto ints = [](size_t v) { return static_cast<int64_t>(v); };
    const Kernel& k = reduce ? s.reduce : s.gather;
    if (gpu)
      k.launch({programs, s.ranks}, cuda::DevicePtr<const float>{src, 0}, cuda::DevicePtr<float>{half, 0},
               cuda::DevicePtr<int64_t>{s.flags, 0}, cuda::DevicePtr<float>{dst, 0}, ints(piece), ints(in_stride),
               ints(out_stride), s.slices);
    else
      k.launch({programs, s.ranks}, src, half, s.flags, dst, ints(piece), ints(in_stride), ints(out_stride), s.slices);
  }
}

void Collectives::all_gather(const float* in, float* out, size_t count) { run(false, in, out, count, 0, count); }
void Collectives::reduce_scatter(const float* in, float* out, size_t count) { run(true, in, out, count, count, 0); }
void Collectives::all_reduce(const float* in, float* out, size_t count, AllReduce algorithm) {
  const State& s = *s_;
  if (algorithm == AllReduce::automatic)
    algorithm = s.ranks > 2 && count * 4 >= kTwoShotBytes ? AllReduce::two_shot : AllReduce::one_shot;
  // Two shots: each rank sums one part (16-byte aligned) and gathers the others' sums; the
  // elements past ranks whole parts, fewer than 4 per rank, go in one shot.
  const size_t part = count / s.ranks / 4 * 4;
  if (algorithm == AllReduce::one_shot || s.ranks == 1 || part == 0) return run(true, in, out, count, 0, 0);
  float* mine = out + detail::world_rank(s.target) * part;
  run(true, in, mine, part, part, 0);
  run(false, mine, out, part, 0, part);
  const size_t body = part * s.ranks;
  if (body < count) run(true, in + body, out + body, count - body, 0, 0);
}

}  // namespace tiledist::kernels
