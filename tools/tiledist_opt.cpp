// tiledist-opt: parses tile IR, runs passes, prints the result (the driver of the FileCheck
// tests in tests/ir/).
//   tiledist-opt [--pass NAME ...] [--pipeline] [--locs] [--target T] [--emit llvm-lowered|llvm|asm]
//                [--num-warps N] [--num-stages N] [--lowering L] [--world nvshmem] FILE|-
// A pass is one of the optimizer's (ir/passes/) or, with a GPU --target, a GPU pass
// (codegen/passes/: layout_assignment).
// --emit lowers the result for the target (the host CPU unless --target names another, as
// tiledist-compile does) and prints LLVM IR or assembly instead.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "codegen/passes/passes.h"
#include "ir/builder.h"
#include "ir/passes/passes.h"
#include "ir/printer.h"
#include "jit/context.h"

int main(int argc, char** argv) {
  using namespace tiledist;
  std::vector<std::string> passes;
  std::string file;
  bool locs = false;
  std::string emit;
  std::string target = "host";
  CompileOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pass" && i + 1 < argc)
      passes.push_back(argv[++i]);
    else if (a.rfind("--pass=", 0) == 0)
      passes.push_back(a.substr(7));
    else if (a == "--pipeline")
      passes.push_back("pipeline");
    else if (a == "--locs")
      locs = true;
    else if (a == "--emit" && i + 1 < argc)
      emit = argv[++i];
    else if (a == "--target" && i + 1 < argc)
      target = argv[++i];
    else if (a == "--num-warps" && i + 1 < argc)
      options.num_warps = std::atoi(argv[++i]);
    else if (a == "--num-stages" && i + 1 < argc)
      options.num_stages = std::atoi(argv[++i]);
    else if (a == "--lowering" && i + 1 < argc)
      options.lowering = argv[++i];
    else if (a == "--world" && i + 1 < argc)
      options.world = argv[++i];
    else if (file.empty())
      file = a;
    else {
      std::fprintf(
          stderr,
          "usage: tiledist-opt [--pass NAME ...] [--pipeline] [--locs] [--target T] [--emit llvm-lowered|llvm|asm]\n"
          "                    [--num-warps N] [--num-stages N] [--lowering L] [--world nvshmem] FILE|-\n");
      return 2;
    }
  }
  std::stringstream ss;
  if (file.empty() || file == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "tiledist-opt: cannot open %s\n", file.c_str());
      return 2;
    }
    ss << in.rdbuf();
  }
  try {
    options.validate();
    const Target t = Target::parse(target);
    auto fns = ir::parse(ss.str(), file.empty() ? "<stdin>" : file);
    for (auto& f : fns) {
      for (auto& p : passes) {
        if (p == "pipeline") {
          ir::optimize(*f);
          continue;
        }
        const ir::Pass* pass = ir::find_pass(p);
        const codegen::GpuPass* gpu_pass = pass ? nullptr : codegen::find_gpu_pass(p);
        if (!pass && !gpu_pass) {
          std::fprintf(stderr, "tiledist-opt: unknown pass '%s'\n", p.c_str());
          return 2;
        }
        if (pass) {
          pass->run(*f);
        } else if (!t.is_gpu()) {
          std::fprintf(stderr, "tiledist-opt: '%s' is a GPU pass: give --target (sm_80, sm_90a, gfx90a, gfx942)\n",
                       p.c_str());
          return 2;
        } else {
          codegen::GpuPassContext ctx =
              codegen::GpuPassContext::for_arch(t.arch, options.num_warps, options.num_stages, options.lowering);
          ctx.prefetch_dots = true;  // (a pass named runs; warp specialization over TMA rings)
          ctx.warp_specialize = ctx.tma;
          gpu_pass->run(*f, ctx);
        }
        ir::verify(*f);
      }
      if (emit.empty()) {
        std::fputs(ir::print(*f, {locs}).c_str(), stdout);
      } else if (emit == "llvm" || emit == "llvm-lowered" || emit == "asm") {
        jit::Context ctx;
        jit::Stage stage = emit == "llvm"  ? jit::Stage::llvm
                           : emit == "asm" ? jit::Stage::asm_
                                           : jit::Stage::llvm_lowered;
        std::fputs(ctx.emit(*f, t, options, stage).c_str(), stdout);
      } else {
        std::fprintf(stderr, "tiledist-opt: --emit takes llvm-lowered, llvm or asm\n");
        return 2;
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
