// Optimization passes over the tile IR, and the pipeline that runs them in order.
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace tiledist::ir {

void fold(Function& f);             // constant folding and algebraic simplification
void cse(Function& f);              // common subexpression elimination of pure ops
void dce(Function& f);              // dead code elimination
void licm(Function& f);             // loop-invariant code motion out of for/while bodies
void fold_wait_loops(Function& f);  // a loop of waits on consecutive signal words: one wait of them all

struct Pass {
  const char* name;
  void (*run)(Function&);
};

/// The pipeline, in order: reading this list tells what the optimizer does.
const std::vector<Pass>& pipeline();
/// Looks a pass up by name; null if there is none.
const Pass* find_pass(const std::string& name);

/// Runs the pipeline, verifying after each pass. Prints the IR to stderr after the passes named
/// in $TILEDIST_PRINT_AFTER (a comma-separated list, or "all").
void optimize(Function& f);

/// Prints `f` to stderr, headed with the pass's name, if $TILEDIST_PRINT_AFTER names the pass
/// (or says "all"): what optimize does after each pass, and the GPU pipeline after its own.
void print_if_asked(const Function& f, const std::string& pass);

/// Helpers shared by the passes.
bool has_side_effects(const Op& op);
/// The constant an op's value is (a scalar constant, or a splat of one), if it is one.
const Op* constant_source(const Value* v);
/// Erases ops for which `pred` holds from `b` (not recursing).
void erase_ops_if(Block& b, const std::function<bool(const Op&)>& pred);

}  // namespace tiledist::ir
