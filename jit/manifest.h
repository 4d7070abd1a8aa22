// Specializations as data: what a job compiled (recorded with TILEDIST_RECORD=manifest.json),
// what tiledist-warmup compiles ahead of a job, and what TILEDIST_JIT=off names when it misses.
//
// A manifest is JSON:
//   {"version": 1, "specializations": [
//     {"kernel": "gemm", "target": "sm_90a", "constants": {"BM": 128, "BN": 128, "BK": 32},
//      "options": {"num_warps": 4, "num_stages": 3, "check_bounds": false}, "args": "AAAAAA"}]}
// "args" has a letter per runtime argument: A = 16-aligned, 1 = the integer 1, - = nothing known
// (see ArgFact); empty for the generic variant.
#pragma once

#include <string>
#include <vector>

#include "dsl/kernel_def.h"
#include "jit/target.h"

namespace tiledist::jit {

struct Specialization {
  std::string kernel;
  std::string target;  // Target::name(): "sm_90a", "host", ...
  Constants constants;
  CompileOptions options;
  ArgFacts facts;

  /// One line for messages and the manifest's identity: `gemm sm_90a BM=128,... num_warps=4,...`.
  std::string str() const;
  /// The tiledist-warmup command that compiles exactly this specialization.
  std::string warmup_command() const;
  bool operator<(const Specialization& o) const { return str() < o.str(); }
};

std::string facts_str(const ArgFacts& facts);
/// Parses an "args" string; throws Error naming the bad letter.
ArgFacts parse_facts(const std::string& s);

/// Reads a manifest; throws Error naming the file and what is wrong with it.
std::vector<Specialization> read_manifest(const std::string& path);
/// Adds `s` to the manifest at `path` (created if missing), under a lock so that the ranks of a
/// job and successive runs merge their records; the file is replaced atomically.
void record_specialization(const std::string& path, const Specialization& s);

}  // namespace tiledist::jit
