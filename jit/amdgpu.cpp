#include "jit/amdgpu.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "jit/llvm_codegen.h"
#include "lld/Common/Driver.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "support/support.h"

LLD_HAS_DRIVER(elf)

namespace tiledist::jit {

namespace {

/// Where the device libraries' bitcode is: the first directory that holds ocml.bc.
std::string device_libs_dir() {
  if (const char* d = std::getenv("TILEDIST_ROCM_DEVICE_LIBS"); d && *d) return d;
  for (const char* d : {"/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/opt/rocm/amdgcn/bitcode",
                        "/usr/lib/llvm-19/lib/clang/19/lib/amdgcn/bitcode"})
    if (llvm::sys::fs::exists(str_cat(d, "/ocml.bc"))) return d;
  return "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";
}

/// The ISA version the libraries' __oclc_ISA_version holds for an arch: gfx942 is 9402. (Defined
/// here rather than linked from oclc_isa_version_*.bc: Debian's libraries predate gfx942.)
int isa_version(const std::string& arch) {
  TD_ASSERT(arch.size() >= 6 && arch.rfind("gfx9", 0) == 0, "not a CDNA arch: ", arch);
  return 9000 + std::stoi(arch.substr(4, 1), nullptr, 16) * 100 + std::stoi(arch.substr(5), nullptr, 16);
}

/// Gives the library's declaration of a control variable its value (the functions linked read
/// it, and LLVM folds their branches on it).
void define_control(llvm::Module& m, const char* name, llvm::Type* t, uint64_t value) {
  llvm::GlobalVariable* g = m.getNamedGlobal(name);
  if (!g) return;  // (no function linked reads it)
  TD_ASSERT(g->getValueType() == t, "the device libraries declare ", name, " with another type");
  g->setInitializer(llvm::ConstantInt::get(t, value));
  g->setConstant(true);
  g->setLinkage(llvm::GlobalValue::InternalLinkage);
}

}  // namespace

void link_amdgpu_device_libs(llvm::Module& m, const std::string& arch) {
  if (!first_declared(m, "__ocml_")) return;
  const std::string path = device_libs_dir() + "/ocml.bc";
  // Only what the kernel calls, internalized: the code object keeps the kernel alone.
  link_bitcode(m, path, true, "math functions of the ROCm device libraries",
               ": apt-get install rocm-device-libs, or set TILEDIST_ROCM_DEVICE_LIBS to the directory of ocml.bc");
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* i8 = llvm::Type::getInt8Ty(ctx);
  llvm::Type* i32 = llvm::Type::getInt32Ty(ctx);
  define_control(m, "__oclc_ISA_version", i32, static_cast<uint64_t>(isa_version(arch)));
  define_control(m, "__oclc_ABI_version", i32, 500);
  define_control(m, "__oclc_wavefrontsize64", i8, 1);
  define_control(m, "__oclc_finite_only_opt", i8, 0);
  define_control(m, "__oclc_unsafe_math_opt", i8, 0);
  define_control(m, "__oclc_daz_opt", i8, 0);
  define_control(m, "__oclc_correctly_rounded_sqrt32", i8, 1);
}

std::string link_amdgpu_code_object(const std::string& object, const std::string& kernel) {
  // lld reads and writes files: a private directory for the two.
  llvm::SmallString<128> dir;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("tiledist-lld", dir))
    throw Error(str_cat("tiledist: a temporary directory for linking kernel '", kernel, "': ", ec.message()));
  const std::string in = str_cat(dir.str().str(), "/", kernel, ".o"),
                    out = str_cat(dir.str().str(), "/", kernel, ".hsaco");
  struct Cleanup {
    std::string dir, in, out;
    ~Cleanup() {
      llvm::sys::fs::remove(in);
      llvm::sys::fs::remove(out);
      llvm::sys::fs::remove(dir);
    }
  } cleanup{dir.str().str(), in, out};
  {
    std::ofstream f(in, std::ios::binary);
    f.write(object.data(), static_cast<std::streamsize>(object.size()));
    if (!f) throw Error(str_cat("tiledist: writing ", in, " to link kernel '", kernel, "'"));
  }
  std::string messages;
  llvm::raw_string_ostream os(messages);
  const char* args[] = {"ld.lld", "-shared", "--no-undefined", in.c_str(), "-o", out.c_str()};
  static std::mutex mu;  // (lld keeps global state: one link at a time)
  lld::Result r;
  {
    std::lock_guard<std::mutex> lock(mu);
    r = lld::lldMain(args, os, os, {{lld::Gnu, &lld::elf::link}});
  }
  if (r.retCode != 0)
    throw Error(str_cat("tiledist: lld could not link the code object of kernel '", kernel, "': ", os.str()));
  auto buffer = llvm::MemoryBuffer::getFile(out);
  if (!buffer) throw Error(str_cat("tiledist: reading ", out, ": ", buffer.getError().message()));
  return (*buffer)->getBuffer().str();
}

}  // namespace tiledist::jit
