#include "dsl/profile.h"

#include "ir/attrs.h"

namespace tiledist::tl {

namespace {

/// A profile op of `phase` in the trace in progress, when it profiles.
void mark(const char* op, const std::string& name, ir::ProfilePhase phase, std::initializer_list<Operand> args,
          const SrcLoc& loc) {
  dsl::Trace& trace = dsl::Trace::current(op);
  if (name.empty()) throw Error::at(op, Location::from(loc), "a region needs a name");
  if (args.size() > 2)
    throw Error::at(op, Location::from(loc),
                    str_cat("takes at most 2 arguments (a tile's coordinates), got ", args.size()));
  if (!trace.profiling()) return;
  std::vector<ir::Value*> values;
  for (const Operand& a : args) {
    if (a.is_literal ? a.literal_is_float
                     : (a.tensor.type().is_tensor() || !a.tensor.type().is_int() || a.tensor.is_ptr()))
      throw Error::at(op, Location::from(loc),
                      str_cat("its arguments are integer scalars, got ",
                              a.is_literal ? std::string("a floating-point number") : a.tensor.type().str()));
    values.push_back(scalar(a, DType::i32, loc).value());
  }
  ir::Builder& b = trace.builder();
  b.set_loc(Location::from(loc));
  b.create(ir::OpCode::Profile, values, {}, {{"region", name}, {"phase", std::string(ir::name_of(phase))}});
}

}  // namespace

void profile(const std::string& name, const std::function<void()>& body, std::initializer_list<Operand> args,
             SrcLoc loc) {
  mark("profile", name, ir::ProfilePhase::begin, args, loc);
  body();
  mark("profile", name, ir::ProfilePhase::end, args, loc);
}

void profile_event(const std::string& name, std::initializer_list<Operand> args, SrcLoc loc) {
  mark("profile_event", name, ir::ProfilePhase::instant, args, loc);
}

}  // namespace tiledist::tl
