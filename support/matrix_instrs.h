// The matrix instructions of each GPU arch: one table, read by the GPU passes (which dots a
// matrix unit takes, in which accumulator layout), by Target::has (the matrix-unit
// capabilities) and by the kernel library (tile sizes made of whole instructions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tiledist {

enum class MatrixUnit : uint8_t {
  mma_sync,  // NVIDIA tensor cores, a warp's mma.sync (sm_80 on)
  wgmma,     // Hopper's warpgroup MMA (sm_90a)
  mfma,      // AMD matrix cores, a wavefront's MFMA (gfx90a, gfx942)
};

/// One matrix instruction: the threads that issue it together, the accumulator tile it makes
/// (M x N; wgmma takes any N that is a multiple of `n_step` up to `n`), and its K in bytes of
/// an operand (K = k_bytes / element size).
struct MatrixInstr {
  MatrixUnit unit;
  int threads;  // a warp (32), a warpgroup (128), a wavefront (64)
  int m, n, n_step;
  int k_bytes;
  bool f8;  // takes f8 operands (e4m3, e5m2) as well as 16-bit ones
};

/// `arch`'s instructions (sm_80, sm_89, sm_90, sm_90a, gfx90a, gfx942; sm_89 is the GPU passes'
/// form of Hopper without wgmma), the one to prefer first; empty for an arch without any.
const std::vector<MatrixInstr>& matrix_instrs(const std::string& arch);
/// The first of `arch`'s instructions on `unit`, or null.
const MatrixInstr* matrix_instr(const std::string& arch, MatrixUnit unit);

}  // namespace tiledist
