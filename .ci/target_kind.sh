#!/bin/sh
# No Target::Kind comparison or switch outside the backends (issue 25): the rest of the compiler,
# the kernel library and the tools ask the target (Target::has, is_gpu, runs_on_cuda) or its
# backend (jit/backend.h). Allowed: jit/target.* (constructors, naming), jit/backend*.cpp (the
# dispatch), jit/backends/ and tests/. Run from anywhere (ctest: structure.target_kind); prints
# each use found.
cd "$(dirname "$0")/.." || exit 2
hits=$(grep -rn --include='*.cpp' --include='*.h' 'Target::Kind::' support ir dsl codegen runtime jit kernels tools bench \
  tiledist.h | grep -v -e '^jit/target\.' -e '^jit/backend[^/]*\.cpp:' -e '^jit/backends/')
if [ -n "$hits" ]; then
  echo "Target::Kind outside the backends (ask Target::has, is_gpu, runs_on_cuda, or the backend):"
  echo "$hits"
  exit 1
fi
