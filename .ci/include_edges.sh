#!/bin/sh
# The layers' include edges (issue 25): each layer includes only the layers below it.
#   support <- ir <- dsl, codegen <- jit <- kernels <- mega <- model, tools;  support <- runtime <- jit
# Run from the repository root (ctest: structure.include_edges). Prints each forbidden include.
cd "$(dirname "$0")/.." || exit 2
bad=0
check() {  # check LAYER FORBIDDEN...
  layer=$1
  shift
  for f in "$@"; do
    hits=$(grep -rn --include='*.cpp' --include='*.h' "#include \"$f/" "$layer" 2>/dev/null)
    if [ -n "$hits" ]; then
      echo "$layer/ may not include $f/:"
      echo "$hits"
      bad=1
    fi
  done
}
check support ir dsl codegen runtime jit kernels mega model
check ir dsl codegen runtime jit kernels mega model
check runtime ir dsl codegen jit kernels mega model
check dsl codegen runtime jit kernels mega model
check codegen dsl runtime jit kernels mega model
check jit kernels mega model
check kernels mega model
check mega model
exit $bad
