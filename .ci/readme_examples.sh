#!/bin/sh
# The README's code is the examples' (issue 30): every region of examples/*/*.{cpp,h} between
# "// readme:begin NAME" and "// readme:end" must stand in README.md as it is, line for line
# (less the markers' indentation, where a region lies inside a function).
#   readme_examples.sh [SOURCE_DIR]
set -eu
src=${1:-.}
status=0
count=0
for f in "$src"/examples/*/*.cpp "$src"/examples/*/*.h; do
  # Each region's lines, then whether the README holds them consecutively.
  for name in $(sed -n 's|^ *// readme:begin \(.*\)$|\1|p' "$f"); do
    count=$((count + 1))
    if ! awk -v name="$name" '
        FNR == NR { t = $0; sub(/^ */, "", t)
                    if (t == "// readme:begin " name) { on = 1; indent = length($0) - length(t) }
                    else if (on && t == "// readme:end") on = 0
                    else if (on) want[n++] = substr($0, indent + 1)
                    next }
        { line[m++] = $0 }
        END { if (n == 0) exit 1
              for (i = 0; i + n <= m; i++) { for (j = 0; j < n && line[i + j] == want[j]; j++) ;
                                            if (j == n) exit 0 }
              exit 1 }' "$f" "$src/README.md"; then
      echo "readme_examples.sh: README.md does not hold the region '$name' of $f as it stands there"
      status=1
    fi
  done
done
echo "readme_examples.sh: $count regions checked"
exit $status
