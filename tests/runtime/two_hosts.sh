#!/bin/sh
# A job of two hosts on this machine: two tiledist-run launchers, 2 ranks each, meeting at a free
# port of 127.0.0.1 (runtime/rendezvous.h).
#   two_hosts.sh TILEDIST_RUN PROGRAM MODE ok|fails PATTERN
# ok: both launchers end well and each host's output holds PATTERN; fails: the first host's
# launcher ends with an error status (not its timeout's 124) and the output of one of them holds
# PATTERN (which rank sees a fault first, and names it, is a race between the hosts).
run=$1 prog=$2 mode=$3 want=$4 pattern=$5
port=$((20000 + $$ % 30000))
# (a port nobody listens on: /proc/net/tcp* list listeners' ports in hex)
while cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -qi ":$(printf %04X $port) "; do port=$((port + 1)); done
log1=$(mktemp)
"$run" -n 2 --nodes 2 --node-rank 1 --master 127.0.0.1:$port --timeout 60 "$prog" "$mode" > "$log1" 2>&1 &
host1=$!
out0=$("$run" -n 2 --nodes 2 --node-rank 0 --master 127.0.0.1:$port --timeout 60 "$prog" "$mode" 2>&1)
status0=$?
wait $host1
status1=$?
out1=$(cat "$log1")
rm -f "$log1"
printf '== host 0 (status %s)\n%s\n== host 1 (status %s)\n%s\n' "$status0" "$out0" "$status1" "$out1"
if [ "$want" = ok ]; then
  [ $status0 -eq 0 ] && [ $status1 -eq 0 ] && printf '%s' "$out0" | grep -qE "$pattern" && printf '%s' "$out1" | grep -qE "$pattern"
else
  [ $status0 -ne 0 ] && [ $status0 -ne 124 ] && printf '%s\n%s' "$out0" "$out1" | grep -qE "$pattern"
fi
