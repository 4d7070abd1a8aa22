#include "codegen/host/lowering.h"

namespace tiledist::codegen {

const char* const kHostHelperF32ToF8E4M3 = "tiledist_f32_to_f8e4m3";
const char* const kHostHelperF8E4M3ToF32 = "tiledist_f8e4m3_to_f32";
const char* const kHostHelperF32ToF8E5M2 = "tiledist_f32_to_f8e5m2";
const char* const kHostHelperF8E5M2ToF32 = "tiledist_f8e5m2_to_f32";
const char* const kHostHelperCheckAccess = "tiledist_check_access";

HostModule lower_host(const ir::Function& f, llvm::LLVMContext& ctx, const HostOptions& opts) {
  return host::HostLowering(f, ctx, opts).run();
}

}  // namespace tiledist::codegen
