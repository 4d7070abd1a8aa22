// The textual form of the tile IR: printing and parsing. print(parse(print(f))) == print(f).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace tiledist::ir {

struct PrintOptions {
  bool locs = false;  // append loc("file":line:col) to each op that has one
};

/// Prints a function deterministically: values are numbered in order of definition.
std::string print(const Function& f, PrintOptions opts = {});

/// Parses every `func` in `text`; `source_name` is used in error messages. Throws Error with
/// the line and column of the first problem. The result is verified.
std::vector<std::unique_ptr<Function>> parse(const std::string& text, const std::string& source_name = "<input>");
/// Parses text that holds exactly one function.
std::unique_ptr<Function> parse_function(const std::string& text, const std::string& source_name = "<input>");

}  // namespace tiledist::ir
