// kernels::AgAttention and kernels::UlyssesAttention (sequence-parallel attention by AllGather and
// by all-to-all) on the CPU backend, one process a rank (tiledist-run -n N): runs of different
// shapes back to back on one object (its two gathered buffers in turn), causal and not, slices
// not a multiple of the blocks, then the arguments they refuse (tests/kernels/
// sp_attention_check.h checks each run).
#include <chrono>
#include <thread>

#include "tests/jit/error_of.h"
#include "tests/kernels/collectives_check.h"
#include "tests/kernels/sp_attention_check.h"

namespace tiledist {
namespace {
using testing_collectives::HostMemory;
using testing_sp::check_sp_attention;

TEST(AgAttention, Causal) {
  kernels::AgAttention attn(Target::host(), 4, 2, 64, /*max_batch*/ 2, /*max_seqlen*/ 130);
  check_sp_attention<HostMemory>(1, 2, 70, 4, 2, 64, true, attn);   // (a partial key block, two query blocks)
  check_sp_attention<HostMemory>(2, 1, 5, 4, 2, 64, true, attn);    // (a slice shorter than a block)
  check_sp_attention<HostMemory>(3, 1, 130, 4, 2, 64, true, attn);  // (three query blocks)
}

// Runs back to back at changing shapes (the stress harness's find: causal, rank 0 waits for no
// peer and could run two calls ahead, into the buffer a later rank still read). The last rank
// comes late to each call, so that a rank running ahead would do so every time; an empty run
// between (no call, nothing sent: the next run's buffer is still the right one).
template <class Attn>
void runs_back_to_back(Attn& attn, int heads, int kv_heads, bool in_place = false) {
  int call = 1;
  for (auto [batch, seqlen] : std::vector<std::pair<int, int>>{{2, 37}, {1, 100}, {2, 3}, {2, 64}, {1, 1}, {2, 99}}) {
    if (rank() == world_size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    check_sp_attention<HostMemory>(call++, batch, seqlen, heads, kv_heads, 64, true, attn, nullptr, in_place);
    if (call == 3) {
      const bf16* none = nullptr;
      attn.run(none, none, none, static_cast<bf16*>(nullptr), 0, 64);
    }
  }
}
TEST(AgAttention, CausalRunsBackToBack) {
  kernels::AgAttention attn(Target::host(), 2, 1, 64, 2, 100);
  runs_back_to_back(attn, 2, 1);
}

TEST(AgAttention, NotCausal) {
  kernels::AgAttention attn(Target::host(), 2, 2, 128, 3, 40, ir::DType::bf16, false);
  check_sp_attention<HostMemory>(1, 3, 40, 2, 2, 128, false, attn);
  check_sp_attention<HostMemory>(2, 2, 33, 2, 2, 128, false, attn);
  check_sp_attention<HostMemory>(3, 1, 1, 2, 2, 128, false, attn);  // (one token a rank)
}

// Ulysses: the heads split over the ranks (24 query and 12 KV heads: a multiple of 1 to 4 ranks).
TEST(UlyssesAttention, CausalAndNot) {
  kernels::UlyssesAttention causal(Target::host(), 24, 12, 64, /*max_batch*/ 2, /*max_seqlen*/ 70);
  check_sp_attention<HostMemory>(1, 2, 70, 24, 12, 64, true, causal);
  check_sp_attention<HostMemory>(2, 1, 5, 24, 12, 64, true, causal);
  check_sp_attention<HostMemory>(3, 2, 33, 24, 12, 64, true, causal);
  check_sp_attention<HostMemory>(4, 1, 140, 24, 12, 64, true,
                                 causal);  // (one sequence past max_seqlen: the slots a run's)
  kernels::UlyssesAttention full(Target::host(), 12, 12, 128, 1, 40, ir::DType::bf16, false);
  check_sp_attention<HostMemory>(1, 1, 40, 12, 12, 128, false, full);
  check_sp_attention<HostMemory>(2, 1, 1, 12, 12, 128, false, full);
}

// (12 query and KV heads: a multiple of 1 to 4 ranks; the outputs over the queries)
TEST(UlyssesAttention, CausalRunsBackToBackInPlace) {
  kernels::UlyssesAttention attn(Target::host(), 12, 12, 64, 2, 100);
  runs_back_to_back(attn, 12, 12, true);
}

TEST(UlyssesAttention, BadArguments) {
  using test_util::error_of;
  const int n = world_size();
  auto says = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << e << "' does not say '" << part << "'";
  };
  if (n > 1)
    says(error_of([&] { kernels::UlyssesAttention(Target::host(), n + 1, 1, 64, 1, 8); }),
         str_cat("heads = ", n + 1, ", kv_heads = 1 over ", n, " ranks"));
  says(error_of([&] { kernels::UlyssesAttention(Target::host(), 12, 12, 96, 1, 8); }), "head_dim = 96");
  kernels::UlyssesAttention attn(Target::host(), 12, 12, 64, 2, 8);
  bf16 x{};
  says(error_of([&] { attn.run(&x, &x, &x, &x, 2, 9); }), "18 tokens past the capacity of 16");
  says(error_of([&] { attn.run(&x, static_cast<const bf16*>(nullptr), &x, &x, 1, 8); }), "a null pointer");
  f16 y{};
  says(error_of([&] { attn.run(&y, &y, &y, &y, 1, 8); }), "run with f16 operands on a UlyssesAttention made for bf16");
}

TEST(AgAttention, BadArguments) {
  using test_util::error_of;
  auto says = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "'" << e << "' does not say '" << part << "'";
  };
  says(error_of([] { kernels::AgAttention(Target::host(), 4, 3, 64, 1, 8); }), "heads = 4, kv_heads = 3");
  says(error_of([] { kernels::AgAttention(Target::host(), 4, 2, 96, 1, 8); }), "head_dim = 96");
  kernels::AgAttention attn(Target::host(), 4, 2, 64, 2, 8);
  bf16 x{};
  says(error_of([&] { attn.run(&x, &x, &x, &x, 2, 9); }), "18 tokens past the capacity of 16");
  says(error_of([&] { attn.run(&x, static_cast<const bf16*>(nullptr), &x, &x, 1, 8); }), "a null pointer");
  f16 y{};
  says(error_of([&] { attn.run(&y, &y, &y, &y, 1, 8); }), "run with f16 operands on an AgAttention made for bf16");
}

}  // namespace
}  // namespace tiledist
