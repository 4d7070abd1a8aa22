// Recursive-descent parser for the text that printer.cpp writes. `//` starts a comment, so
// FileCheck lines can live in the same .tir file as the IR they check.
#include <cctype>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>

#include "ir/builder.h"
#include "ir/layout.h"
#include "ir/printer.h"

namespace tiledist::ir {

namespace {

class Parser {
 public:
  Parser(const std::string& text, std::string source) : s_(text), source_(std::move(source)) {}

  std::vector<std::unique_ptr<Function>> run() {
    std::vector<std::unique_ptr<Function>> fns;
    skip_ws();
    while (pos_ < s_.size()) {
      fns.push_back(parse_func());
      skip_ws();
    }
    for (auto& f : fns) verify(*f);
    return fns;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(str_cat("tiledist: ", source_, ":", line, ":", col, ": parse error: ", msg));
  }

  void skip_ws() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        ++pos_;
      } else if (s_.compare(pos_, 2, "//") == 0) {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  /// Whether `c` comes next on the current line (spaces and tabs skipped).
  bool on_this_line(char c) const {
    size_t p = pos_;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return p < s_.size() && s_[p] == c;
  }
  char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool accept(const std::string& tok) {
    skip_ws();
    if (s_.compare(pos_, tok.size(), tok) == 0) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  void expect(const std::string& tok) {
    if (!accept(tok)) fail("expected '" + tok + "'");
  }
  std::string ident() {
    skip_ws();
    size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    if (b == pos_) fail("expected a name");
    return s_.substr(b, pos_ - b);
  }
  std::string value_name() {
    expect("%");
    size_t b = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.'))
      ++pos_;
    if (b == pos_) fail("expected a value name after '%'");
    return s_.substr(b, pos_ - b);
  }
  int64_t integer() {
    skip_ws();
    char* end = nullptr;
    long long v = std::strtoll(s_.c_str() + pos_, &end, 10);
    if (end == s_.c_str() + pos_) fail("expected an integer");
    pos_ = end - s_.c_str();
    return v;
  }
  std::string quoted() {
    expect("\"");
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        c = s_[pos_++];
        if (c == 'n') c = '\n';
      }
      out += c;
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  Type elem_type() {
    std::string name = ident();
    if (name == "ptr") {
      expect("<");
      auto dt = parse_dtype(ident());
      if (!dt) fail("unknown pointee dtype");
      AddrSpace space = AddrSpace::global;
      if (accept(",")) {
        std::string sp = ident();
        if (sp == "shared")
          space = AddrSpace::shared;
        else if (sp == "symmetric")
          space = AddrSpace::symmetric;
        else if (sp != "global")
          fail("unknown address space '" + sp + "'");
      }
      expect(">");
      return Type::ptr(*dt, space);
    }
    auto dt = parse_dtype(name);
    if (!dt) fail("unknown type '" + name + "'");
    return Type::scalar(*dt);
  }
  Type type() {
    skip_ws();
    const bool memdesc = s_.compare(pos_, 8, "memdesc<") == 0;
    if (memdesc || s_.compare(pos_, 7, "tensor<") == 0) {
      pos_ += memdesc ? 8 : 7;
      std::vector<int64_t> shape;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        shape.push_back(integer());
        expect("x");
      }
      if (shape.empty()) fail("a tensor needs a shape");
      Type t = elem_type().with_shape(shape);
      if (accept(",")) {
        skip_ws();
        const size_t at = pos_;
        try {
          t.layout = parse_layout(s_, pos_);
        } catch (const std::invalid_argument& e) {
          pos_ = at;  // the message names the layout that starts here
          fail(e.what());
        }
      }
      expect(">");
      if (memdesc) {
        if (t.is_ptr || !t.layout || t.layout->kind != Layout::Kind::shared || t.shape.size() < 3)
          fail("a memdesc holds tiles of numbers in a #shared layout: memdesc<SxRxCxT, #shared<...>>");
        t.space = AddrSpace::shared;
      }
      return t;
    }
    return elem_type();
  }

  Attr attr_value() {
    char c = peek();
    if (c == '"') return quoted();
    if (c == '[') {
      ++pos_;
      std::vector<int64_t> v;
      if (!accept("]")) {
        do v.push_back(integer());
        while (accept(","));
        expect("]");
      }
      return v;
    }
    if (accept("nan")) return std::numeric_limits<double>::quiet_NaN();
    if (accept("inf")) return std::numeric_limits<double>::infinity();
    if (accept("-inf")) return -std::numeric_limits<double>::infinity();
    skip_ws();
    size_t b = pos_;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) ++pos_;
    bool is_float = false;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
            ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')))) {
      if (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E') is_float = true;
      ++pos_;
    }
    std::string tok = s_.substr(b, pos_ - b);
    if (tok.empty()) fail("expected an attribute value");
    char* end = nullptr;
    if (is_float) {
      double d = std::strtod(tok.c_str(), &end);
      if (*end) fail("bad number '" + tok + "'");
      return d;
    }
    long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end) fail("bad integer '" + tok + "'");
    return static_cast<int64_t>(v);
  }

  Value* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    fail("use of undefined value %" + name);
  }
  void define(const std::string& name, Value* v) {
    if (!scopes_.back().emplace(name, v).second) fail("value %" + name + " is defined twice");
  }

  std::unique_ptr<Function> parse_func() {
    expect("func");
    expect("@");
    auto f = std::make_unique<Function>();
    f->name = ident();
    scopes_.emplace_back();
    expect("(");
    if (!accept(")")) {
      do {
        std::string n = value_name();
        expect(":");
        Value* v = f->body.add_arg(type(), std::isdigit(static_cast<unsigned char>(n[0])) ? "" : n);
        define(n, v);
      } while (accept(","));
      expect(")");
    }
    expect("{");
    parse_ops(f->body, "}");
    scopes_.pop_back();
    return f;
  }

  void parse_ops(Block& b, const std::string& end) {
    while (!accept(end)) {
      if (pos_ >= s_.size()) fail("unexpected end of input");
      parse_op(b);
    }
  }

  void parse_op(Block& b) {
    std::vector<std::string> result_names;
    if (peek() == '%') {
      do result_names.push_back(value_name());
      while (accept(","));
      expect("=");
    }
    size_t op_pos = pos_;
    std::string name = ident();
    auto code = parse_opcode(name);
    if (!code) fail("unknown op '" + name + "'");
    auto op = std::make_unique<Op>();
    op->code = *code;
    op->parent = &b;
    if (on_this_line('%')) {  // (an op that takes nothing, such as async_commit, ends its line)
      do op->operands.push_back(lookup(value_name()));
      while (accept(","));
    }
    skip_ws();
    if (s_.compare(pos_, 1, "{") == 0 && !region_ahead()) {
      expect("{");
      if (!accept("}")) {
        do {
          std::string k = ident();
          expect("=");
          op->attrs[k] = attr_value();
        } while (accept(","));
        expect("}");
      }
    }
    if (accept(":")) {
      do op->add_result(type());
      while (accept(","));
    }
    if (result_names.size() != op->results.size())
      fail(str_cat("'", name, "' names ", result_names.size(), " results but lists ", op->results.size(), " types"));
    if (accept("loc(")) {
      op->loc.file = quoted();
      expect(":");
      op->loc.line = static_cast<int>(integer());
      expect(":");
      op->loc.col = static_cast<int>(integer());
      expect(")");
    }
    while (region_ahead()) {
      expect("{");
      expect("^(");
      auto region = std::make_unique<Block>();
      region->parent = op.get();
      scopes_.emplace_back();
      if (!accept(")")) {
        do {
          std::string n = value_name();
          expect(":");
          define(n, region->add_arg(type()));
        } while (accept(","));
        expect(")");
      }
      expect(":");
      parse_ops(*region, "}");
      scopes_.pop_back();
      op->regions.push_back(std::move(region));
    }
    if (static_cast<int>(op->regions.size()) != op->info().num_regions) {
      pos_ = op_pos;
      fail(str_cat("'", name, "' needs ", op->info().num_regions, " regions, got ", op->regions.size()));
    }
    for (size_t i = 0; i < result_names.size(); ++i) define(result_names[i], op->results[i].get());
    b.ops.push_back(std::move(op));
  }

  bool region_ahead() {
    skip_ws();
    if (s_.compare(pos_, 1, "{") != 0) return false;
    size_t save = pos_;
    ++pos_;
    bool r = peek() == '^';
    pos_ = save;
    return r;
  }

  const std::string& s_;
  std::string source_;
  size_t pos_ = 0;
  std::vector<std::map<std::string, Value*>> scopes_;
};

}  // namespace

std::vector<std::unique_ptr<Function>> parse(const std::string& text, const std::string& source_name) {
  return Parser(text, source_name).run();
}

std::unique_ptr<Function> parse_function(const std::string& text, const std::string& source_name) {
  auto fns = parse(text, source_name);
  if (fns.size() != 1) throw Error(str_cat("tiledist: ", source_name, ": expected one function, found ", fns.size()));
  return std::move(fns[0]);
}

}  // namespace tiledist::ir
