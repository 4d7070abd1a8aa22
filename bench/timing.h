// What the GPU benchmarks share: timing a launch, and running the PyTorch side of a comparison
// (a python script of bench/) as a child process in the same run.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tiledist.h"

namespace tiledist::bench {

/// Median of `reps` runs of `fn`, each timed with CUDA events on the default stream, after
/// `warmup` untimed ones, in milliseconds (as the python side times).
inline double median_ms(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  runtime::Timer timer;
  for (int i = 0; i < reps; ++i) {
    timer.start();
    fn();
    t.push_back(timer.stop());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// PyTorch's python ($TILEDIST_TORCH_PYTHON, default /opt/torch/.venv/bin/python) and the
/// baseline script `script` ($`env`, else bench/`script` from here, beside the binary, or in
/// the source tree above a build's bench/), or empty strings where either is missing.
inline std::pair<std::string, std::string> find_torch(const char* argv0, const char* env, const std::string& script) {
  const char* py = std::getenv("TILEDIST_TORCH_PYTHON");
  std::string python = py ? py : "/opt/torch/.venv/bin/python";
  if (access(python.c_str(), X_OK) != 0) return {};
  std::vector<std::string> candidates;
  if (const char* s = std::getenv(env)) candidates.push_back(s);
  candidates.push_back("bench/" + script);
  const std::string exe = argv0;
  const std::string dir = exe.find('/') == std::string::npos ? "." : exe.substr(0, exe.rfind('/'));
  candidates.push_back(dir + "/" + script);
  candidates.push_back(dir + "/../../bench/" + script);
  for (const auto& c : candidates)
    if (access(c.c_str(), R_OK) == 0) return {python, c};
  return {};
}

/// Runs `cmd`, returning its output (stderr included), and whether it exited with 0.
inline std::pair<std::string, bool> run_command(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {"popen failed", false};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  return {out, pclose(p) == 0};
}

/// The rest of the first line of `out` that starts with "`key` ", or "".
inline std::string field(const std::string& out, const std::string& key) {
  for (size_t line = 0; line < out.size();) {
    const size_t end = std::min(out.find('\n', line), out.size());
    if (out.compare(line, key.size() + 1, key + " ") == 0)
      return out.substr(line + key.size() + 1, end - line - key.size() - 1);
    line = end + 1;
  }
  return "";
}

}  // namespace tiledist::bench
