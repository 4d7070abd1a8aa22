// tiledist-compile: prints any stage of a registered kernel.
//   tiledist-compile KERNEL [--target host|sm_80|sm_90|sm_90a|gfx942|gfx90a] [--emit
//   tile-ir|opt-ir|gpu-ir|llvm|asm|binary]
//                    [-o FILE] [--const NAME=VALUE ...] [--aligned all|none|NAME,...] [--one NAME,...] [--num-warps N]
//                    [--num-stages N] [--no-tma] [--warp-specialize] [--lowering
//                    gpu_ir|gpu_ir_mma|gpu_ir_prefetch|gpu_ir_tma|gpu_ir_ws]
// GPU targets print by default the variant a launch with 16-aligned arguments gets (what runs
// in practice: integers that are multiples of 16, 16-byte aligned pointers); --aligned none
// prints the generic one. --emit binary writes what a launch loads: PTX for NVIDIA GPUs, a code
// object for AMD GPUs, an object file for the host.
//   tiledist-compile --list
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "jit/backend.h"
#include "kernels/kernels.h"

namespace {

int usage(const char* msg) {
  std::fprintf(
      stderr,
      "tiledist-compile: %s\n"
      "usage: tiledist-compile KERNEL [--target host|sm_80|sm_90|sm_90a|gfx942|gfx90a] "
      "[--emit tile-ir|opt-ir|gpu-ir|llvm|asm|binary] [-o FILE] [--const NAME=VALUE ...]\n"
      "                        [--aligned all|none|NAME,...] [--one NAME,...] [--num-warps N] [--num-stages N] "
      "[--no-tma] [--warp-specialize] [--lowering "
      "gpu_ir|gpu_ir_mma|gpu_ir_prefetch|gpu_ir_tma|gpu_ir_ws]\n"
      "       tiledist-compile --list\n",
      msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tiledist;
  std::string kernel, target = "host", emit = "opt-ir", output;
  Constants constants;
  bool list = false;
  std::string aligned_arg;
  std::string one_arg;
  CompileOptions options = CompileOptions::from_env();
  auto count = [](const std::string& flag, const std::string& v) {
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 1 || n > 64)
      throw Error("tiledist-compile: " + flag + " takes a number from 1 to 64, got '" + v + "'");
    return static_cast<int>(n);
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw Error(std::string("tiledist-compile: ") + flag + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--list")
        list = true;
      else if (a == "--target")
        target = value("--target");
      else if (a == "--emit")
        emit = value("--emit");
      else if (a == "-o")
        output = value("-o");
      else if (a == "--aligned")
        aligned_arg = value("--aligned");
      else if (a == "--one")
        one_arg = value("--one");
      else if (a == "--num-warps")
        options.num_warps = count(a, value("--num-warps"));
      else if (a == "--num-stages")
        options.num_stages = count(a, value("--num-stages"));
      else if (a == "--no-tma")
        options.tma = false;
      else if (a == "--warp-specialize")
        options.warp_specialize = true;
      else if (a == "--lowering")
        options.lowering = value("--lowering");
      else if (a == "--const") {
        std::string kv = value("--const");
        size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) return usage(("--const takes NAME=VALUE, got '" + kv + "'").c_str());
        constants.insert_or_assign(kv.substr(0, eq),
                                   ConstValue::parse("tiledist-compile", kv.substr(0, eq), kv.substr(eq + 1)));
      } else if (a == "-h" || a == "--help") {
        usage("prints a stage of a registered kernel");
        return 0;
      } else if (!a.empty() && a[0] == '-')
        return usage(("unknown option '" + a + "'").c_str());
      else if (kernel.empty())
        kernel = a;
      else
        return usage(("unexpected argument '" + a + "'").c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  }
  auto& registry = Registry::global();
  if (list) {
    for (auto& name : registry.names()) {
      const KernelDef* def = registry.find(name);
      std::string params, consts;
      for (auto& p : def->params()) {
        if (p.kind == ParamKind::constant) {
          auto d = def->defaults().find(p.name);
          consts += (consts.empty() ? "" : ", ") + p.name + (d != def->defaults().end() ? "=" + d->second.str() : "");
        } else {
          params += (params.empty() ? "" : ", ") + p.name + ": " + p.type.str();
        }
      }
      std::printf("%-12s (%s) [%s]\n", name.c_str(), params.c_str(), consts.c_str());
    }
    return 0;
  }
  if (kernel.empty()) return usage("no kernel given");
  const KernelDef* def = registry.find(kernel);
  if (!def) {
    std::string known;
    for (auto& n : registry.names()) known += (known.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "tiledist-compile: unknown kernel '%s' (known: %s)\n", kernel.c_str(), known.c_str());
    return 2;
  }
  jit::Stage stage;
  if (emit == "tile-ir")
    stage = jit::Stage::tile_ir;
  else if (emit == "opt-ir")
    stage = jit::Stage::opt_ir;
  else if (emit == "gpu-ir")
    stage = jit::Stage::gpu_ir;
  else if (emit == "llvm")
    stage = jit::Stage::llvm;
  else if (emit == "llvm-lowered")
    stage = jit::Stage::llvm_lowered;
  else if (emit == "asm")
    stage = jit::Stage::asm_;
  else if (emit == "binary")
    stage = jit::Stage::binary;
  else
    return usage(("unknown --emit '" + emit + "' (tile-ir, opt-ir, gpu-ir, llvm, asm, binary)").c_str());
  if (stage == jit::Stage::binary && output.empty() && isatty(STDOUT_FILENO))
    return usage("--emit binary writes bytes: give -o FILE (or redirect the output)");
  try {
    Target t = Target::parse(target);
    std::vector<ParamInfo> runtime = def->runtime_params();
    // (the variant a launch gets: aligned where the target specializes at launch)
    if (aligned_arg.empty()) aligned_arg = jit::Backend::for_target(t).specializes_at_launch() ? "all" : "none";
    ArgFacts aligned = aligned_arg == "all" ? def->aligned_facts() : ArgFacts(runtime.size(), ArgFact::none);
    // NAME,NAME,...: each a parameter of the kernel that `ok` takes, marked `fact`.
    auto mark = [&](const std::string& list, const char* flag, const char* what, bool (*ok)(const ir::Type&),
                    ArgFact fact) {
      size_t start = 0;
      while (start <= list.size()) {
        size_t end = list.find(',', start);
        std::string name = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
        size_t i = 0;
        while (i < runtime.size() && runtime[i].name != name) ++i;
        if (i == runtime.size() || !ok(runtime[i].type))
          throw Error(str_cat("tiledist-compile: ", flag, " names '", name, "', not ", what, " parameter of ", kernel));
        aligned[i] = fact;
        if (end == std::string::npos) break;
        start = end + 1;
      }
    };
    if (aligned_arg != "all" && aligned_arg != "none")
      mark(
          aligned_arg, "--aligned", "an integer or pointer", [](const ir::Type& t) { return !t.is_float(); },
          ArgFact::aligned16);
    // (a launch specializes an integer argument equal to 1 as the constant: M = N = K = 1)
    if (!one_arg.empty())
      mark(one_arg, "--one", "an integer", [](const ir::Type& t) { return t.is_int(); }, ArgFact::one);
    const std::string text = jit::Context::global().emit(*def, constants, t, options, stage, aligned);
    FILE* out = output.empty() ? stdout : std::fopen(output.c_str(), "wb");
    if (!out) throw Error("tiledist-compile: cannot write " + output);
    const bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
    if ((out != stdout && std::fclose(out) != 0) || !ok)
      throw Error("tiledist-compile: writing " + (output.empty() ? "stdout" : output) + " failed");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
