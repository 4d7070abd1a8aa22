// The .safetensors reader and writer (model/safetensors.h). The format (huggingface/safetensors):
// 8 bytes, the header's length N as a little-endian u64; N bytes of JSON, an object mapping each
// tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} (bytes from the end of the
// header) and an optional "__metadata__" of strings; then the data. The JSON is LLVM's parser's.
#include "model/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "support/support.h"

namespace tiledist::model {

namespace {

namespace fs = std::filesystem;

struct DTypeName {
  const char* name;
  ir::DType dtype;
  int bytes;
};
// The format's dtypes that tiledist computes with (U8, U16, ... have no ir::DType: named as unknown).
constexpr DTypeName kDTypes[] = {
    {"BOOL", ir::DType::i1, 1},        {"I8", ir::DType::i8, 1},         {"I16", ir::DType::i16, 2},
    {"I32", ir::DType::i32, 4},        {"I64", ir::DType::i64, 8},       {"F16", ir::DType::f16, 2},
    {"BF16", ir::DType::bf16, 2},      {"F32", ir::DType::f32, 4},       {"F64", ir::DType::f64, 8},
    {"F8_E4M3", ir::DType::f8e4m3, 1}, {"F8_E5M2", ir::DType::f8e5m2, 1}};

const DTypeName* find_dtype(const std::string& name) {
  for (const DTypeName& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// The product of the dimensions, or -1 past 2^62 (no such tensor fits a file).
int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(path, ec);
  if (ec) throw Error(str_cat("tiledist: safetensors: cannot read ", path, ": ", ec.message()));
  return n;
}

}  // namespace

std::string safetensors_dtype(ir::DType t) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == t) return d.name;
  throw Error(str_cat("tiledist: safetensors: no dtype of the format for ", ir::dtype_name(t)));
}

struct SafeTensors::State {
  std::string path;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;

  /// Reads one file's header into `tensors` (each name once across the files).
  void add_file(const std::string& file) {
    const uint64_t size = file_size(file);
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(str_cat("tiledist: safetensors: cannot open ", file));
    unsigned char len[8];
    if (size < 8 || !in.read(reinterpret_cast<char*>(len), 8))
      throw Error(str_cat("tiledist: safetensors: ", file, " is not a safetensors file (", size,
                          " bytes: no 8-byte header length)"));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    if (n > size - 8)
      throw Error(str_cat("tiledist: safetensors: ", file, ": a header of ", n, " bytes in a file of ", size));
    std::string text(n, '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(n)))
      throw Error(str_cat("tiledist: safetensors: ", file, ": cannot read its header"));
    const uint64_t data = size - 8 - n;  // (the bytes past the header)
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
    if (!parsed)
      throw Error(str_cat("tiledist: safetensors: ", file, ": the header is not JSON (",
                          llvm::toString(parsed.takeError()), ")"));
    const llvm::json::Object* top = parsed->getAsObject();
    if (!top) throw Error(str_cat("tiledist: safetensors: ", file, ": the header is not a JSON object"));
    for (const auto& [key, value] : *top) {
      const std::string name = key.str();
      auto bad = [&](const std::string& what) {
        return Error(str_cat("tiledist: safetensors: ", file, ": tensor '", name, "': ", what));
      };
      if (name == "__metadata__") {
        const llvm::json::Object* m = value.getAsObject();
        if (!m) throw bad("not an object of strings");
        for (const auto& [k, v] : *m) {
          std::optional<llvm::StringRef> s = v.getAsString();
          if (!s) throw bad(str_cat("'", k.str(), "' is not a string"));
          metadata[k.str()] = s->str();
        }
        continue;
      }
      const llvm::json::Object* o = value.getAsObject();
      if (!o) throw bad("not an object");
      TensorInfo t;
      t.file = file;
      std::optional<llvm::StringRef> dtype = o->getString("dtype");
      if (!dtype) throw bad("no dtype");
      t.dtype = dtype->str();
      const DTypeName* d = find_dtype(t.dtype);
      if (!d)
        throw bad(
            str_cat("dtype '", t.dtype, "' (tiledist reads BOOL, I8-I64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2)"));
      const llvm::json::Array* shape = o->getArray("shape");
      if (!shape) throw bad("no shape");
      for (const llvm::json::Value& v : *shape) {
        std::optional<int64_t> dim = v.getAsInteger();
        if (!dim || *dim < 0) throw bad("a shape of other than non-negative integers");
        t.shape.push_back(*dim);
      }
      const llvm::json::Array* offsets = o->getArray("data_offsets");
      std::optional<int64_t> begin, end;
      if (offsets && offsets->size() == 2) begin = (*offsets)[0].getAsInteger(), end = (*offsets)[1].getAsInteger();
      if (!begin || !end || *begin < 0 || *end < *begin) throw bad("no data_offsets [begin, end]");
      const int64_t count = elements(t.shape);
      if (count < 0 || uint64_t(*end - *begin) != uint64_t(count) * uint64_t(d->bytes))
        throw bad(str_cat("bytes [", *begin, ", ", *end, ") for ", t.dtype, " of shape ", shape_str(t.shape)));
      if (uint64_t(*end) > data)
        throw bad(str_cat("bytes [", *begin, ", ", *end, ") past the file's ", data, " bytes of data"));
      t.offset = 8 + n + uint64_t(*begin);
      t.bytes = uint64_t(*end - *begin);
      if (auto [at, fresh] = tensors.emplace(name, t); !fresh) throw bad(str_cat("also in ", at->second.file));
    }
  }

  /// The bytes [offset, offset + n) of `file`.
  static void read_at(const std::string& file, uint64_t offset, std::byte* to, uint64_t n) {
    std::ifstream in(file, std::ios::binary);
    if (!in || !in.seekg(static_cast<std::streamoff>(offset)) ||
        !in.read(reinterpret_cast<char*>(to), static_cast<std::streamsize>(n)))
      throw Error(str_cat("tiledist: safetensors: cannot read ", n, " bytes at ", offset, " of ", file));
  }
};

SafeTensors::SafeTensors(const std::string& path) : s_(std::make_unique<State>()) {
  s_->path = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    s_->add_file(path);
    return;
  }
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    std::ifstream in(index);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
    if (!parsed)
      throw Error(str_cat("tiledist: safetensors: ", index.string(), " is not JSON (",
                          llvm::toString(parsed.takeError()), ")"));
    const llvm::json::Object* top = parsed->getAsObject();
    const llvm::json::Object* map = top ? top->getObject("weight_map") : nullptr;
    if (!map) throw Error(str_cat("tiledist: safetensors: ", index.string(), " has no weight_map"));
    std::map<std::string, std::string> where;  // tensor -> its file
    for (const auto& [k, v] : *map) {
      std::optional<llvm::StringRef> f = v.getAsString();
      if (!f) throw Error(str_cat("tiledist: safetensors: ", index.string(), ": '", k.str(), "' names no file"));
      where[k.str()] = (fs::path(path) / f->str()).string();
    }
    std::vector<std::string> files;
    files.reserve(where.size());
    for (const auto& [name, file] : where) files.push_back(file);
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    for (const std::string& f : files) s_->add_file(f);
    for (const auto& [name, file] : where) {
      auto it = s_->tensors.find(name);
      if (it == s_->tensors.end() || it->second.file != file)
        throw Error(str_cat("tiledist: safetensors: ", index.string(), " puts '", name, "' in ", file,
                            it == s_->tensors.end() ? ", which lacks it" : str_cat(", found in ", it->second.file)));
    }
    return;
  }
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  if (files.empty())
    throw Error(
        str_cat("tiledist: safetensors: ", path, " holds no .safetensors file (and no model.safetensors.index.json)"));
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) s_->add_file(f);
}

SafeTensors::~SafeTensors() = default;

bool SafeTensors::has(const std::string& name) const { return s_->tensors.count(name) != 0; }

const TensorInfo& SafeTensors::info(const std::string& name) const {
  auto it = s_->tensors.find(name);
  if (it == s_->tensors.end()) throw Error(str_cat("tiledist: safetensors: ", s_->path, " has no tensor '", name, "'"));
  return it->second;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> v;
  for (const auto& [name, t] : s_->tensors) v.push_back(name);
  return v;
}

const std::map<std::string, std::string>& SafeTensors::metadata() const { return s_->metadata; }

std::vector<std::byte> SafeTensors::read(const std::string& name, ir::DType dtype,
                                         const std::vector<int64_t>& shape) const {
  return read_shard(name, dtype, shape, -1, 0, 1);
}

std::vector<std::byte> SafeTensors::read_shard(const std::string& name, ir::DType dtype,
                                               const std::vector<int64_t>& shape, int dim, int rank, int ranks) const {
  const TensorInfo& t = info(name);
  const std::string want = safetensors_dtype(dtype);
  if (t.dtype != want || t.shape != shape)
    throw Error(str_cat("tiledist: safetensors: '", name, "' in ", t.file, " is ", t.dtype, " ", shape_str(t.shape),
                        "; expected ", want, " ", shape_str(shape)));
  if (dim == -1) {  // (read(): the whole tensor, a scalar's too)
    std::vector<std::byte> out(t.bytes);
    if (!out.empty()) State::read_at(t.file, t.offset, out.data(), out.size());
    return out;
  }
  if (dim < 0 || dim >= static_cast<int>(shape.size()) || ranks < 1 || rank < 0 || rank >= ranks)
    throw Error(str_cat("tiledist: safetensors: '", name, "': part ", rank, " of ", ranks, " along dimension ", dim,
                        " of ", shape_str(shape)));
  if (shape[size_t(dim)] % ranks != 0)
    throw Error(str_cat("tiledist: safetensors: '", name, "' ", shape_str(shape), ": dimension ", dim, " (",
                        shape[size_t(dim)], ") does not split into ", ranks, " equal parts"));
  // The part: `outer` runs (the dimensions before dim) of `part` bytes, each `stride` apart.
  const uint64_t unit = uint64_t(ir::dtype_bytes(dtype));
  uint64_t outer = 1, inner = unit;
  for (int i = 0; i < dim; ++i) outer *= uint64_t(shape[size_t(i)]);
  for (size_t i = size_t(dim) + 1; i < shape.size(); ++i) inner *= uint64_t(shape[i]);
  const uint64_t part = uint64_t(shape[size_t(dim)] / ranks) * inner, stride = uint64_t(shape[size_t(dim)]) * inner;
  std::vector<std::byte> out(outer * part);
  if (out.empty()) return out;
  if (ranks == 1 || outer == 1) {
    State::read_at(t.file, t.offset + uint64_t(rank) * part, out.data(), out.size());
    return out;
  }
  std::ifstream in(t.file, std::ios::binary);
  for (uint64_t o = 0; o < outer; ++o)
    if (!in || !in.seekg(static_cast<std::streamoff>(t.offset + o * stride + uint64_t(rank) * part)) ||
        !in.read(reinterpret_cast<char*>(out.data() + o * part), static_cast<std::streamsize>(part)))
      throw Error(str_cat("tiledist: safetensors: cannot read '", name, "' from ", t.file));
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  llvm::json::Object header;
  if (!metadata.empty()) {
    llvm::json::Object m;
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t at = 0;
  for (const TensorData& t : tensors) {
    const int64_t count = elements(t.shape);
    if (count < 0 || uint64_t(count) * uint64_t(ir::dtype_bytes(t.dtype)) != t.bytes.size())
      throw Error(str_cat("tiledist: safetensors: writing '", t.name, "': ", t.bytes.size(), " bytes for ",
                          ir::dtype_name(t.dtype), " of shape ", shape_str(t.shape)));
    if (header.find(t.name) != header.end() || t.name == "__metadata__")
      throw Error(str_cat("tiledist: safetensors: writing '", t.name, "' twice (or a reserved name)"));
    llvm::json::Array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    header[t.name] = llvm::json::Object{{"dtype", safetensors_dtype(t.dtype)},
                                        {"shape", std::move(shape)},
                                        {"data_offsets", llvm::json::Array{int64_t(at), int64_t(at + t.bytes.size())}}};
    at += t.bytes.size();
  }
  std::string text = llvm::formatv("{0}", llvm::json::Value(std::move(header))).str();
  text.append((8 - text.size() % 8) % 8, ' ');  // (the data 8-byte aligned, as the format's writer does)
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorData& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!out.flush()) throw Error(str_cat("tiledist: safetensors: cannot write ", path));
}

}  // namespace tiledist::model
