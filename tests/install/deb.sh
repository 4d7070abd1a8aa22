#!/bin/sh
# The Debian package (issue 30): cpack makes it from the build tree, its Depends name the
# run-time libraries, and an example builds and runs against its files unpacked into a scratch
# root (dpkg-deb -x: nothing installed on this machine).
#   deb.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" > "$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; echo "deb.sh: cpack failed"; exit 1; }
deb=$(ls "$tmp"/pkg/tiledist_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "deb.sh: $(basename "$deb"), Depends: $depends"
for lib in libhwloc libzstd libstdc++6; do
  case "$depends" in *"$lib"*) ;; *) echo "deb.sh: Depends does not name $lib"; exit 1 ;; esac
done
dpkg-deb -x "$deb" "$tmp/root"
[ -f "$tmp/root/usr/include/tiledist/tiledist.h" ] || { echo "deb.sh: no usr/include/tiledist/tiledist.h"; exit 1; }
export TILEDIST_CACHE_DIR="$tmp/cache"
cmake -S "$src/examples/vector_add" -B "$tmp/ex" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/root/usr" > "$tmp/ex.log" 2>&1 &&
  cmake --build "$tmp/ex" >> "$tmp/ex.log" 2>&1 || { cat "$tmp/ex.log"; echo "deb.sh: vector_add did not build"; exit 1; }
"$tmp/ex/vector_add"
"$tmp/root/usr/bin/tiledist-run" -n 2 --timeout 120 "$tmp/root/usr/bin/tiledist-compile" --list > /dev/null
echo "deb.sh: vector_add built and ran against the unpacked package"
