#!/bin/sh
# tiledist as another project uses it (issue 30): installs the build into a scratch prefix, then
# against that tree alone (no path into the source or build tree): compiles each installed header
# alone with -Wall -Wextra -Werror, configures, builds and runs examples/ by find_package, and
# builds one by pkg-config.
#   check.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }

# No installed binary looks for libraries in the build tree (its run paths); the tools run from
# the prefix; the CMake and pkg-config files name no path outside it.
for f in "$prefix"/bin/* "$prefix"/lib/libtiledist.so.*.*.*; do
  if readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -qF "$build"; then
    echo "check.sh: $f looks for libraries in the build tree"; exit 1
  fi
done
if grep -rlF -e "$build" -e "$src" "$prefix"/lib/cmake "$prefix"/lib/pkgconfig > "$tmp/refs"; then
  echo "check.sh: package files that name the source or build tree:"; cat "$tmp/refs"; exit 1
fi
"$prefix/bin/tiledist-compile" --list | grep -q '^add' || { echo "check.sh: the installed tiledist-compile lists no kernels"; exit 1; }

# Each header alone, first in its translation unit.
inc=$prefix/include/tiledist
count=0
for h in $(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort); do
  printf '#include "%s"\n' "$h" > "$tmp/one.cpp"
  if ! c++ -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I"$inc" "$tmp/one.cpp"; then
    echo "check.sh: the installed $h does not compile alone (-Wall -Wextra -Werror)"
    exit 1
  fi
  count=$((count + 1))
done
echo "check.sh: $count installed headers compile alone"

# The examples by find_package(tiledist), each built and run (those with a RANKS file as that
# many processes by the installed tiledist-run).
export TILEDIST_CACHE_DIR="$tmp/cache"
for ex in "$src"/examples/*/; do
  name=$(basename "$ex")
  cmake -S "$ex" -B "$tmp/$name" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/$name.log" 2>&1 &&
    cmake --build "$tmp/$name" >> "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; echo "check.sh: example $name did not build"; exit 1; }
  if [ -f "$ex/RANKS" ]; then
    "$prefix/bin/tiledist-run" -n "$(cat "$ex/RANKS")" --timeout 120 "$tmp/$name/$name" ||
      { echo "check.sh: example $name failed under tiledist-run"; exit 1; }
  else
    "$tmp/$name/$name" || { echo "check.sh: example $name failed"; exit 1; }
  fi
done

# The examples' kernels (kernels.cpp) warmed by the installed tiledist-warmup, which compiles
# them in-process against the installed headers (where it was built with its C++ front end).
for k in "$src"/examples/*/kernels.cpp; do
  [ -f "$k" ] || continue
  if [ -z "$(find "$prefix" -name libtiledist-cc.so)" ]; then
    echo "check.sh: no libtiledist-cc.so installed (built without libclang-19-dev): warmup of $k skipped"
    continue
  fi
  "$prefix/bin/tiledist-warmup" "$k" --target host,sm_90a --cache "$tmp/warm" ||
    { echo "check.sh: tiledist-warmup $k failed"; exit 1; }
done

# The same first kernel by pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir tiledist)
c++ $(pkg-config --cflags tiledist) "$src/examples/vector_add/vector_add.cpp" "$src/examples/vector_add/kernels.cpp" -o "$tmp/by_pkg_config" \
  $(pkg-config --libs tiledist) -Wl,-rpath,"$libdir"
"$tmp/by_pkg_config"
echo "check.sh: pkg-config $(pkg-config --modversion tiledist) builds vector_add"
