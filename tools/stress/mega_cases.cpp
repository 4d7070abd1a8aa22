// The stress harness's mega kernel subject (cases.h): mega::MegaKernel over a random program of
// the library's add and GEMM kernels on a pool of square f32 buffers, each op reading two of
// them and writing a third, so that reads follow writes, and writes follow reads and writes, in
// every order (the adds' tiles by ranges of elements, the GEMMs' whole buffers); a random number
// of programs, either schedule, the job's streams. Each run's buffers are fresh, and every
// buffer after the run is checked against the program executed on the host in double.
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "mega/mega_kernel.h"
#include "tools/stress/buffers.h"

namespace tiledist::stress {

namespace {

using reference::random_values;

class MegaSubject : public Subject {
 public:
  MegaSubject(Job& job, int id) : id_(id) {
    n_ = ragged(job, job.gpu() ? 256 : 40);
    buffers_ = int(job.draw(3, 5));
    for (int64_t ops = job.draw(1, 8); ops > 0; --ops) {
      Op o;
      o.gemm = job.chance(0.4);
      o.x = int(job.draw(0, buffers_ - 1)), o.y = int(job.draw(0, buffers_ - 1));
      do o.out = int(job.draw(0, buffers_ - 1));
      while (o.out == o.x || o.out == o.y);
      ops_.push_back(o);
    }
    queue_ = job.chance(0.5);
    // (round robin needs all its programs resident at once: few enough on a GPU that two such
    // steps on the job's two streams fit beside each other)
    programs_ = int(job.draw(1, !job.gpu() ? 8 : queue_ ? 132 : 32));
    block_ = 1 << job.draw(6, 10);
  }
  std::string name() const override {
    std::string ops;
    for (const Op& o : ops_) ops += str_cat(ops.empty() ? "" : ", ", o.gemm ? "gemm" : "add");
    return str_cat("mega #", id_, " (", n_, " x ", n_, ", ", buffers_, " buffers, ", ops, "; ", programs_,
                   " programs, ", queue_ ? "queue" : "round robin", ", adds of ", block_, ")");
  }
  void run_once(Job& job) override {
    const uint64_t seed = job.data_seed(uint64_t(id_) << 32 | ++runs_);
    const int64_t n = n_, count = n * n;
    std::vector<std::shared_ptr<Mem<float>>> bufs;
    bufs.reserve(size_t(buffers_));
    for (int b = 0; b < buffers_; ++b)
      bufs.push_back(mem(job, random_values<float>(seed + uint64_t(b), size_t(count))));
    mega::TaskGraph g(str_cat("stress_", id_));
    for (auto& b : bufs) g.input(b->ptr(), count);
    using mega::cols, mega::in, mega::out;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Op& o = ops_[i];
      float *x = bufs[size_t(o.x)]->ptr(), *y = bufs[size_t(o.y)]->ptr(), *z = bufs[size_t(o.out)]->ptr();
      if (o.gemm)
        g.add(str_cat("gemm", i), kernels::gemm_kernel(ir::DType::f32), {{"BM", 32}, {"BN", 32}, {"BK", 16}},
              Grid(tl::cdiv(n, 32), tl::cdiv(n, 32)), {in(x, n, n), in(y, n, n), out(z, n, n), n, n, n});
      else
        g.add(str_cat("add", i), kernels::add_kernel(), {{"BLOCK", block_}}, Grid(tl::cdiv(count, block_)),
              {in(x, count, cols(block_)), in(y, count, cols(block_)), out(z, count, cols(block_)), count});
    }
    auto step = std::make_shared<mega::MegaKernel>(g, job.target(), programs_,
                                                   queue_ ? mega::Schedule::queue : mega::Schedule::round_robin);
    step->run(job.pick_stream());
    const double bound = job.gpu() ? 2e-2 : 1e-5;  // (f32 GEMMs on a GPU: by tf32)
    job.after(str_cat(name(), ": run ", runs_), [&job, step, bufs, seed, n, count, bound, ops = ops_] {
      std::vector<std::vector<double>> want;
      for (size_t b = 0; b < bufs.size(); ++b) {
        const std::vector<float> v = random_values<float>(seed + b, size_t(count));
        want.emplace_back(v.begin(), v.end());
      }
      for (const Op& o : ops) {
        const std::vector<double>&x = want[size_t(o.x)], &y = want[size_t(o.y)];
        std::vector<double> z(size_t(count), 0.0);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            if (o.gemm)
              for (int64_t k = 0; k < n; ++k) s += x[size_t(i * n + k)] * y[size_t(k * n + j)];
            else
              s = x[size_t(i * n + j)] + y[size_t(i * n + j)];
            z[size_t(i * n + j)] = s;
          }
        want[size_t(o.out)] = std::move(z);
      }
      for (size_t b = 0; b < bufs.size(); ++b) {
        std::vector<float> got = bufs[b]->get();
        job.tamper(got);
        double num = 0, den = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double d = double(got[i]) - want[b][i];
          num += d * d, den += want[b][i] * want[b][i];
        }
        const double err = std::sqrt(num / std::max(den, 1e-300));
        if (!(err <= bound))
          return str_cat("relative error ", err, " of buffer ", b, " against the host exceeds ", bound);
      }
      return std::string();
    });
  }

 private:
  struct Op {
    bool gemm = false;
    int x = 0, y = 0, out = 0;
  };
  int id_;
  int64_t n_ = 1;
  int buffers_ = 3, programs_ = 1, block_ = 64;
  bool queue_ = false;
  std::vector<Op> ops_;
  int runs_ = 0;
};

}  // namespace

std::unique_ptr<Subject> make_mega_subject(Job& job, int id) { return std::make_unique<MegaSubject>(job, id); }

}  // namespace tiledist::stress
