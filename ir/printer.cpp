#include "ir/printer.h"

#include <cctype>
#include <map>

namespace tiledist::ir {

namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

class Printer {
 public:
  explicit Printer(PrintOptions opts) : opts_(opts) {}

  std::string run(const Function& f) {
    out_ += "func @" + f.name + "(";
    std::map<std::string, int> seen;
    for (auto& a : f.body.args) seen[a->name]++;
    for (size_t i = 0; i < f.body.args.size(); ++i) {
      const Value* a = f.body.args[i].get();
      names_[a] = is_identifier(a->name) && seen[a->name] == 1 ? "%" + a->name : fresh();
      out_ += (i ? ", " : "") + names_[a] + ": " + a->type.str();
    }
    out_ += ") {\n";
    for (auto& op : f.body.ops) print_op(*op, 1);
    out_ += "}\n";
    return out_;
  }

 private:
  std::string fresh() { return "%" + std::to_string(next_++); }
  void indent(int depth) { out_.append(2 * depth, ' '); }

  void print_op(const Op& op, int depth) {
    indent(depth);
    for (size_t i = 0; i < op.results.size(); ++i) {
      names_[op.results[i].get()] = fresh();
      out_ += (i ? ", " : "") + names_[op.results[i].get()];
    }
    if (!op.results.empty()) out_ += " = ";
    out_ += op.name();
    for (size_t i = 0; i < op.operands.size(); ++i) out_ += (i ? ", " : " ") + name_of(op.operands[i]);
    if (!op.attrs.empty()) {
      out_ += " {";
      bool first = true;
      for (auto& [k, v] : op.attrs) {
        out_ += (first ? "" : ", ") + k + " = " + attr_str(v);
        first = false;
      }
      out_ += "}";
    }
    if (!op.results.empty()) {
      out_ += " :";
      for (size_t i = 0; i < op.results.size(); ++i) out_ += (i ? ", " : " ") + op.results[i]->type.str();
    }
    if (opts_.locs && op.loc.known())
      out_ += str_cat(" loc(", quote(op.loc.file), ":", op.loc.line, ":", op.loc.col, ")");
    for (auto& r : op.regions) {
      out_ += " {\n";
      indent(depth);
      out_ += "^(";
      for (size_t i = 0; i < r->args.size(); ++i) {
        names_[r->args[i].get()] = fresh();
        out_ += (i ? ", " : "") + names_[r->args[i].get()] + ": " + r->args[i]->type.str();
      }
      out_ += "):\n";
      for (auto& inner : r->ops) print_op(*inner, depth + 1);
      indent(depth);
      out_ += "}";
    }
    out_ += "\n";
  }

  std::string name_of(const Value* v) {
    auto it = names_.find(v);
    return it == names_.end() ? "%<undefined>" : it->second;
  }

  PrintOptions opts_;
  std::string out_;
  std::map<const Value*, std::string> names_;
  int next_ = 0;
};

}  // namespace

std::string print(const Function& f, PrintOptions opts) { return Printer(opts).run(f); }

}  // namespace tiledist::ir
