// The .safetensors reader and writer (model/safetensors.h): a file written byte by byte as the
// format describes it is read back; random tensors round-trip, whole and as every rank's part
// along each dimension (the parts cut here by index arithmetic); folders with and without an
// index; and each fault named.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "tests/jit/error_of.h"
#include "tests/jit/temp_dir.h"

namespace tiledist::model {
namespace {

using test_util::error_of;
using test_util::TempDir;

std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<std::byte> v(n);
  for (std::byte& b : v) b = std::byte(rng() & 0xff);
  return v;
}
/// A file: the 8-byte little-endian length of `header`, `header`, then `data`.
void write_raw(const std::string& path, const std::string& header, const std::vector<std::byte>& data) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(uint64_t(header.size()) >> (8 * i)));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}
int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
void expect_has(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nwanted: " << part;
}

TEST(SafeTensors, AFileWrittenByHandIsRead) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<std::byte> data = random_bytes(rng, 32);
  const std::string path = (dir.path / "hand.safetensors").string();
  write_raw(path,
            R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
            R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
            data);
  SafeTensors st(path);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.info("a").dtype, "F32");
  EXPECT_EQ(st.info("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(st.read("a", ir::DType::f32, {2, 3}), std::vector<std::byte>(data.begin(), data.begin() + 24));
  EXPECT_EQ(st.read("b", ir::DType::bf16, {4}), std::vector<std::byte>(data.begin() + 24, data.end()));
  // (rank 1's columns of a: bytes 12..24 of each of its 2 rows of 3 f32 would not split; rows do)
  EXPECT_EQ(st.read_shard("a", ir::DType::f32, {2, 3}, 0, 1, 2),
            std::vector<std::byte>(data.begin() + 12, data.begin() + 24));
}

TEST(SafeTensors, OurFilesAreTheFormats) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const std::string path = (dir.path / "ours.safetensors").string();
  std::vector<TensorData> tensors = {{"w", ir::DType::bf16, {3, 5}, random_bytes(rng, 30)},
                                     {"s", ir::DType::f32, {7}, random_bytes(rng, 28)},
                                     {"e", ir::DType::i64, {0, 4}, {}},
                                     {"scalar", ir::DType::f32, {}, random_bytes(rng, 4)}};
  write_safetensors(path, tensors, {{"who", "tiledist"}});
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data starts 8-byte aligned";
  ASSERT_EQ(file.size(), 8 + n + 62);
  const std::string header = file.substr(8, n);
  expect_has(header, R"("w":{"data_offsets":[0,30],"dtype":"BF16","shape":[3,5]})");
  expect_has(header, R"("s":{"data_offsets":[30,58],"dtype":"F32","shape":[7]})");
  expect_has(header, R"("__metadata__":{"who":"tiledist"})");
  EXPECT_EQ(std::memcmp(file.data() + 8 + n, tensors[0].bytes.data(), 30), 0);
  EXPECT_EQ(std::memcmp(file.data() + 8 + n + 30, tensors[1].bytes.data(), 28), 0);
  // (read back: a scalar (shape []) and an empty tensor too)
  SafeTensors st(path);
  EXPECT_EQ(st.read("scalar", ir::DType::f32, {}), tensors[3].bytes);
  EXPECT_EQ(st.read("e", ir::DType::i64, {0, 4}), std::vector<std::byte>{});
  EXPECT_EQ(st.read("w", ir::DType::bf16, {3, 5}), tensors[0].bytes);
}

// Random tensors of 1 to 4 dimensions round-trip; each rank's part along each dimension that
// splits is the slice [rank * d / ranks, (rank + 1) * d / ranks) of that dimension.
TEST(SafeTensors, RandomTensorsAndTheirPartsComeBack) {
  TempDir dir;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(str_cat("seed ", seed));
  std::mt19937_64 rng(seed);
  const ir::DType dtypes[] = {ir::DType::bf16, ir::DType::f32, ir::DType::f8e4m3, ir::DType::i32, ir::DType::f64};
  std::vector<TensorData> tensors;
  for (int i = 0; i < 12; ++i) {
    TensorData t;
    t.name = str_cat("model.layers.", i, ".weight");
    t.dtype = dtypes[rng() % 5];
    for (size_t d = 0, dims = 1 + rng() % 4; d < dims; ++d) t.shape.push_back(int64_t(1 + rng() % 12));
    t.bytes = random_bytes(rng, size_t(count(t.shape)) * size_t(ir::dtype_bytes(t.dtype)));
    tensors.push_back(std::move(t));
  }
  const std::string path = (dir.path / "random.safetensors").string();
  write_safetensors(path, tensors);
  SafeTensors st(path);
  ASSERT_EQ(st.names().size(), tensors.size());
  for (const TensorData& t : tensors) {
    EXPECT_EQ(st.read(t.name, t.dtype, t.shape), t.bytes) << t.name;
    const size_t unit = size_t(ir::dtype_bytes(t.dtype));
    for (int dim = 0; dim < int(t.shape.size()); ++dim)
      for (int ranks = 1; ranks <= 4; ++ranks) {
        if (t.shape[size_t(dim)] % ranks) continue;
        for (int rank = 0; rank < ranks; ++rank) {
          std::vector<std::byte> want;  // every element whose index along dim is in the rank's slice
          const int64_t d = t.shape[size_t(dim)], lo = rank * d / ranks, hi = (rank + 1) * d / ranks;
          int64_t inner = 1;
          for (size_t j = size_t(dim) + 1; j < t.shape.size(); ++j) inner *= t.shape[j];
          for (int64_t e = 0; e < count(t.shape); ++e) {
            const int64_t along = e / inner % d;
            if (along >= lo && along < hi)
              want.insert(want.end(), t.bytes.begin() + e * int64_t(unit), t.bytes.begin() + (e + 1) * int64_t(unit));
          }
          EXPECT_EQ(st.read_shard(t.name, t.dtype, t.shape, dim, rank, ranks), want)
              << t.name << " dim " << dim << " part " << rank << " of " << ranks;
        }
      }
  }
}

TEST(SafeTensors, FoldersWithAndWithoutAnIndex) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const TensorData a{"a", ir::DType::f32, {2}, random_bytes(rng, 8)},
      b{"b", ir::DType::bf16, {3}, random_bytes(rng, 6)};
  write_safetensors((dir.path / "model-00001-of-00002.safetensors").string(), {a});
  write_safetensors((dir.path / "model-00002-of-00002.safetensors").string(), {b});
  {
    SafeTensors st(dir.path.string());  // (no index: every file)
    EXPECT_EQ(st.read("a", ir::DType::f32, {2}), a.bytes);
    EXPECT_EQ(st.read("b", ir::DType::bf16, {3}), b.bytes);
  }
  std::ofstream((dir.path / "model.safetensors.index.json").string())
      << R"({"metadata": {"total_size": 14}, "weight_map": {"a": "model-00001-of-00002.safetensors", )"
      << R"("b": "model-00002-of-00002.safetensors"}})";
  {
    SafeTensors st(dir.path.string());
    EXPECT_EQ(st.info("b").file, (dir.path / "model-00002-of-00002.safetensors").string());
    EXPECT_EQ(st.read("b", ir::DType::bf16, {3}), b.bytes);
  }
  std::ofstream((dir.path / "model.safetensors.index.json").string())
      << R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})";
  expect_has(error_of([&] { SafeTensors st(dir.path.string()); }),
             "puts 'a' in " + (dir.path / "model-00002-of-00002.safetensors").string());
  std::filesystem::remove(dir.path / "model.safetensors.index.json");
  write_safetensors((dir.path / "again.safetensors").string(), {a});
  expect_has(error_of([&] { SafeTensors st(dir.path.string()); }), "tensor 'a': also in");
  TempDir empty;
  expect_has(error_of([&] { SafeTensors st(empty.path.string()); }), "holds no .safetensors file");
}

TEST(SafeTensors, FaultsAreNamed) {
  TempDir dir;
  const std::string path = (dir.path / "bad.safetensors").string();
  auto opened = [&](const std::string& header, size_t data) {
    write_raw(path, header, std::vector<std::byte>(data));
    return error_of([&] { SafeTensors st(path); });
  };
  std::ofstream(path) << "abc";
  expect_has(error_of([&] { SafeTensors st(path); }), "is not a safetensors file (3 bytes");
  {
    std::ofstream out(path, std::ios::binary);
    const unsigned char len[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    out.write(reinterpret_cast<const char*>(len), 8);
    out << "{}";
  }
  expect_has(error_of([&] { SafeTensors st(path); }), "a header of 65535 bytes in a file of 10");
  expect_has(opened("{\"a\": ", 0), "the header is not JSON");
  expect_has(opened(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1), "tensor 'a': dtype 'U8'");
  expect_has(opened(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8),
             "tensor 'a': bytes [0, 4) for F32 of shape [2]");
  expect_has(opened(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8),
             "tensor 'a': bytes [4, 12) past the file's 8 bytes of data");
  expect_has(opened(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "tensor 'a': no shape");
  write_raw(path, R"({"w":{"dtype":"BF16","shape":[4,6],"data_offsets":[0,48]}})", std::vector<std::byte>(48));
  SafeTensors st(path);
  expect_has(error_of([&] { st.info("v"); }), path + " has no tensor 'v'");
  expect_has(error_of([&] { st.read("w", ir::DType::bf16, {6, 4}); }),
             "'w' in " + path + " is BF16 [4, 6]; expected BF16 [6, 4]");
  expect_has(error_of([&] { st.read("w", ir::DType::f32, {4, 6}); }), "is BF16 [4, 6]; expected F32 [4, 6]");
  expect_has(error_of([&] { st.read_shard("w", ir::DType::bf16, {4, 6}, 1, 0, 4); }),
             "dimension 1 (6) does not split into 4 equal parts");
  expect_has(error_of([&] { write_safetensors(path, {{"x", ir::DType::f32, {3}, std::vector<std::byte>(8)}}); }),
             "writing 'x': 8 bytes for f32 of shape [3]");
}

}  // namespace
}  // namespace tiledist::model
