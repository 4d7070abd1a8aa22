#!/bin/sh
# The warm -> export -> import -> run flow with the tools, on a CPU machine:
#   cache_flow.sh TILEDIST_WARMUP TILEDIST_CACHE TILEDIST_DEMO
# Each step's output is checked; any failure exits non-zero with the step named.
set -u
WARMUP=$1 CACHE=$2 DEMO=$3
T=$(mktemp -d /tmp/tiledist-cache-flow-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "cache_flow: FAILED: $*"; exit 1; }
expect() { grep -q -- "$1" "$T/out" || { cat "$T/out"; fail "$2: expected '$1'"; }; }

# 1. A job records what it compiles; a second run merges into the same manifest.
TILEDIST_CACHE_DIR=$T/job TILEDIST_RECORD=$T/m.json "$DEMO" > "$T/out" 2>&1 || fail "recording run"
TILEDIST_CACHE_DIR=$T/job TILEDIST_RECORD=$T/m.json "$DEMO" > "$T/out" 2>&1 || fail "second recording run"
[ "$(grep -c '"kernel"' "$T/m.json")" = 4 ] || { cat "$T/m.json"; fail "manifest should hold the demo's 4 specializations once each"; }

# 2. Warm a fresh cache from the manifest (host) and from the registry (GPU targets, no GPU needed).
"$WARMUP" "$T/m.json" --cache "$T/warm" > "$T/out" 2>&1 || { cat "$T/out"; fail "warmup from manifest"; }
expect "4 compiled, 0 already cached, 0 failed" "warmup from manifest"
"$WARMUP" "$T/m.json" --cache "$T/warm" > "$T/out" 2>&1 || fail "second warmup"
expect "0 compiled, 4 already cached" "second warmup"
"$WARMUP" --kernels add,softmax --target sm_90a,sm_80 --cache "$T/warm" --jobs 2 > "$T/out" 2>&1 || { cat "$T/out"; fail "registry warmup"; }
expect "8 specializations: 8 compiled" "registry warmup (generic and aligned variants, two targets)"

# 3. A manifest naming a kernel that no longer exists: the others still warm, the run fails naming it.
sed 's/"kernel": "add"/"kernel": "no_such_kernel"/' "$T/m.json" > "$T/stale.json"
"$WARMUP" "$T/stale.json" --cache "$T/stale" > "$T/out" 2>&1 && fail "stale manifest should fail"
expect "FAILED no_such_kernel host" "stale manifest"
expect "not registered in this build" "stale manifest"
expect "3 compiled" "stale manifest (the other kernels)"

# 4. The cache tool: stats, list, verify removes a damaged entry, prune, export/import.
"$CACHE" --cache "$T/warm" stats > "$T/out" 2>&1 || fail "stats"
expect "12 entries" "stats"
expect "sm_90a" "stats by target"
"$CACHE" --cache "$T/warm" list > "$T/out" 2>&1 || fail "list"
expect "softmax  *sm_80" "list"
victim=$(ls "$T/warm"/*.tdk | head -1)
head -c 100 "$victim" > "$T/partial" && cat "$T/partial" > "$victim"
"$CACHE" --cache "$T/warm" verify > "$T/out" 2>&1 && fail "verify should report the damaged entry"
expect "11 entries check out, 1 corrupt removed" "verify"
[ -e "$victim" ] && fail "verify left the damaged entry"
"$CACHE" --cache "$T/warm" export --target sm_90a "$T/sm90.tar.xz" > "$T/out" 2>&1 || { cat "$T/out"; fail "export"; }
"$CACHE" --cache "$T/gpuhost" import "$T/sm90.tar.xz" > "$T/out" 2>&1 || { cat "$T/out"; fail "import"; }
expect "entries added" "import"
"$CACHE" --cache "$T/gpuhost" stats > "$T/out" 2>&1
grep -q "host " "$T/out" && fail "export --target sm_90a carried host entries"
expect "sm_90a" "imported entries"
# --cache after the command is honoured (never the default cache instead); absurd sizes refused.
"$CACHE" stats --cache "$T/gpuhost" > "$T/out" 2>&1 || fail "stats with --cache last"
expect "cache $T/gpuhost" "stats with --cache last"
"$CACHE" --cache "$T/warm" prune --max-size 1e30 > "$T/out" 2>&1 && fail "prune --max-size 1e30 should be refused"
expect "max-size" "prune with an absurd size"
# An archive holding a symlink dressed as an entry, and a stray file: both rejected.
mkdir -p "$T/evil" && ln -s /etc/passwd "$T/evil/0000.tdk" && echo hi > "$T/evil/readme.txt"
tar -C "$T/evil" -cJf "$T/evil.tar.xz" 0000.tdk readme.txt
"$CACHE" --cache "$T/gpuhost2" import "$T/evil.tar.xz" > "$T/out" 2>&1 && fail "import of a symlink should fail"
expect "0 entries added" "import of a symlink"
[ -e "$T/gpuhost2/0000.tdk" ] && fail "a symlink entered the cache"
"$CACHE" --cache "$T/warm" prune --max-size 1 > "$T/out" 2>&1 || fail "prune"
expect "B left" "prune"
"$CACHE" --cache "$T/warm" stats > "$T/out" 2>&1
expect "0 entries" "prune to nothing"

# 5. TILEDIST_JIT=off: a warm cache runs, a cold one fails at once naming the warmup command.
TILEDIST_JIT=off TILEDIST_CACHE_DIR=$T/job "$DEMO" > "$T/out" 2>&1 || { cat "$T/out"; fail "JIT off with a warm cache"; }
expect "0 compiled, 4 from disk" "JIT off with a warm cache"
TILEDIST_JIT=off TILEDIST_CACHE_DIR=$T/cold "$DEMO" > "$T/out" 2>&1 && fail "JIT off with a cold cache should fail"
expect "TILEDIST_JIT=off and kernel 'add' is not in the cache" "JIT off, cold"
expect "tiledist-warmup --target host --kernels add" "JIT off, cold"
echo "cache_flow: all steps passed"
