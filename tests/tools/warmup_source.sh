#!/bin/sh
# tiledist-warmup on a user's C++ source of kernels: compiled in-process by clang, its registered
# kernels warmed; a source that does not compile fails with clang's diagnostic.
set -u
WARMUP=$1
T=$(mktemp -d /tmp/tiledist-warmup-src-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "warmup_source: FAILED: $*"; cat "$T/out"; exit 1; }
cat > "$T/my_kernels.cpp" <<'CPP'
#include "tiledist.h"
using namespace tiledist;
static void scale(tl::Ptr<float> x, tl::Ptr<float> y, tl::Float a, tl::Int n, tl::Const<int> BLOCK) {
  auto offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
  tl::store(y + offs, tl::load(x + offs, offs < n) * a, offs < n);
}
static const KernelDef def("user_scale", scale, {"x", "y", "a", "n", "BLOCK"}, {{"BLOCK", 256}});
TILEDIST_REGISTER(def);
CPP
"$WARMUP" "$T/my_kernels.cpp" --target sm_90a,host --cache "$T/cache" > "$T/out" 2>&1 || fail "warming a source file"
grep -q "registers 1 kernels" "$T/out" || fail "the kernel was not registered"
grep -q "3 specializations: 3 compiled" "$T/out" || fail "expected generic + aligned sm_90a and host"
[ "$(ls "$T/cache"/*.tdk | wc -l)" = 3 ] || fail "three cache entries"
printf '#include "tiledist.h"\nint broken( {\n' > "$T/bad.cpp"
"$WARMUP" "$T/bad.cpp" --target host --cache "$T/cache" > "$T/out" 2>&1 && fail "a broken source should fail"
grep -q "bad.cpp:2" "$T/out" || fail "clang's diagnostic should name the line"
echo "warmup_source: all steps passed"
