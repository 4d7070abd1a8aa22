#include "support/matrix_instrs.h"

namespace tiledist {

const std::vector<MatrixInstr>& matrix_instrs(const std::string& arch) {
  struct Row {
    const char* arch;
    std::vector<MatrixInstr> instrs;
  };
  // mma.sync m16n8 over 32 bytes of K (m16n8k16 for 16-bit types, m16n8k32 for f8 from sm_89
  // on); wgmma m64nN (N = 8..256) a warpgroup; MFMA 32x32 (K 16 bytes: 32x32x8 for 16-bit
  // types) and 16x16 (K 32 bytes).
  constexpr MatrixInstr kMma{MatrixUnit::mma_sync, 32, 16, 8, 8, 32, false};
  constexpr MatrixInstr kMmaF8{MatrixUnit::mma_sync, 32, 16, 8, 8, 32, true};
  constexpr MatrixInstr kWgmma{MatrixUnit::wgmma, 128, 64, 256, 8, 32, true};
  auto mfma = [](bool f8) {
    return std::vector<MatrixInstr>{{MatrixUnit::mfma, 64, 32, 32, 32, 16, f8},
                                    {MatrixUnit::mfma, 64, 16, 16, 16, 32, f8}};
  };
  static const Row table[] = {
      {"sm_80", {kMma}},       {"sm_89", {kMmaF8}},    {"sm_90", {kMma}}, {"sm_90a", {kWgmma, kMmaF8}},
      {"gfx90a", mfma(false)}, {"gfx942", mfma(true)},
  };
  static const std::vector<MatrixInstr> none;
  for (const Row& r : table)
    if (arch == r.arch) return r.instrs;
  return none;
}

const MatrixInstr* matrix_instr(const std::string& arch, MatrixUnit unit) {
  for (const MatrixInstr& i : matrix_instrs(arch))
    if (i.unit == unit) return &i;
  return nullptr;
}

}  // namespace tiledist
