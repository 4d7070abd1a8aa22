/// @file
/// Checkpoints in Hugging Face's .safetensors format (issue 32): an 8-byte little-endian header
/// length, a JSON header naming each tensor's dtype, shape and byte range, then the tensors'
/// bytes. A model's weights are one such file or a folder of them; tensor parallelism reads each
/// rank's slice of a weight straight from the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/dtype.h"

namespace tiledist::model {

/// A tensor's entry in a checkpoint.
struct TensorInfo {
  std::string dtype;           ///< as the format spells it: "BF16", "F32", "F8_E4M3", ...
  std::vector<int64_t> shape;  ///< its dimensions, outermost first
  uint64_t offset = 0;         ///< its first byte in `file` (past the header)
  uint64_t bytes = 0;          ///< its size in bytes
  std::string file;            ///< the .safetensors file that holds it
};

/// The format's name of a dtype ("BF16" for bf16, ...); throws Error for one it has none for.
std::string safetensors_dtype(ir::DType t);

/// The tensors of one .safetensors file, or of a folder of them: the files that Hugging Face's
/// `model.safetensors.index.json` names (each tensor in the file its weight_map says), or every
/// `*.safetensors` file in it where there is no index. Opening reads and checks the headers
/// only; reads take the bytes asked for. Every fault throws Error naming the file and what is
/// wrong: a header past the file's end or not JSON, an unknown dtype, a byte range that is not
/// the shape's size or lies past the data, a tensor named twice, one that the index names but
/// its file lacks.
class SafeTensors {
 public:
  /// Opens a .safetensors file, or a folder of them (above), reading their headers.
  explicit SafeTensors(const std::string& path);
  ~SafeTensors();

  /// Whether the checkpoint holds `name`.
  bool has(const std::string& name) const;
  /// `name`'s entry; throws Error naming it and the checkpoint where it is missing.
  const TensorInfo& info(const std::string& name) const;
  /// Every tensor's name, sorted.
  std::vector<std::string> names() const;
  /// The string metadata of the files' headers (`__metadata__`), merged.
  const std::map<std::string, std::string>& metadata() const;

  /// The bytes of `name`, which must be of `dtype` and `shape` (throws Error naming the tensor,
  /// what it is and what was expected).
  std::vector<std::byte> read(const std::string& name, ir::DType dtype, const std::vector<int64_t>& shape) const;
  /// Rank `rank`'s part of `name` split into `ranks` equal parts along dimension `dim` (a
  /// column-parallel linear layer's weight [out, in] along 0, a row-parallel one's along 1):
  /// checked as read()'s, and that `ranks` divides that dimension. Reads that part alone.
  std::vector<std::byte> read_shard(const std::string& name, ir::DType dtype, const std::vector<int64_t>& shape,
                                    int dim, int rank, int ranks) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// A tensor to write: its name, dtype, shape and bytes (their count the shape's size).
struct TensorData {
  std::string name;                  ///< the tensor's name in the header
  ir::DType dtype = ir::DType::f32;  ///< its elements' type
  std::vector<int64_t> shape;        ///< its dimensions, outermost first
  std::vector<std::byte> bytes;      ///< its elements, row-major
};

/// Writes `tensors` to `path` as one .safetensors file (the header's keys sorted, as LLVM's JSON
/// writer writes them; each tensor's bytes after the one before it in `tensors`), with `metadata`
/// as its `__metadata__`. Throws Error
/// naming a tensor whose bytes are not its shape's size, a name given twice, or a file that
/// cannot be written.
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tiledist::model
