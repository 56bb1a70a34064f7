#!/usr/bin/env bash
# bench/haproxy-lua.sh: where HAProxy's shared-table path spends, frontend
# by frontend, in one HAProxy (2 threads), side by side in one run,
# `wrk -t2 -c64` on each in turn:
#
#   off           HAProxy alone, answering itself
#   true-deny     a Lua converter that only answers true, deciding an
#                 http-request deny: what calling Lua at all costs
#   decide-deny   dthrottle_decide, the shared table's C converter, in the
#                 same rule: the converter and the decision, no Lua action
#   shared        haproxy-shared.cfg's two rules: the converter, and the
#                 Lua action and the 429 rule that a served request skips
#   true-action   the Lua action rule with the empty converter
#
# Every request is served (burst 1,000,000 at a million tokens a second)
# and carries one tag, the client's address. Printed: each run's
# requests/s and HAProxy's CPU per request, then the medians.
#
#   bench/haproxy-lua.sh
#   ROUNDS=5 DURATION=5s bench/haproxy-lua.sh
#
# Needs haproxy, wrk, curl, cc, make and liblua5.3-dev.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4s}
CONNS=${CONNS:-64}
BASE=${BASE:-29101} # ports BASE to BASE+4 on 127.0.0.1

for tool in /usr/sbin/haproxy wrk curl cc make; do
	command -v "$tool" >/dev/null || { echo "haproxy-lua.sh: $tool not found (apt-get install -y haproxy wrk curl gcc make liblua5.3-dev)" >&2; exit 1; }
done
[ -e /usr/include/lua5.3/lua.h ] || { echo "haproxy-lua.sh: no Lua 5.3 headers (apt-get install -y liblua5.3-dev)" >&2; exit 1; }
. bench/lib.sh
bench_tmp haproxy-lua

go build -o "$tmp/dthrottled" ./cmd/dthrottled
bench_haproxy_module
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0666"
[limit]
rate = 1e6
burst = 1000000
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/d.sock" ] && break; sleep 0.05; done
echo 'core.register_converters("bench_true", function() return true end)' >"$tmp/true.lua"
hello='http-request return status 200 content-type text/plain string "hello"'
cat >"$tmp/haproxy.cfg" <<HAPROXY
global
    nbthread 2
    presetenv DTHROTTLE_SOCKET $tmp/d.sock
    lua-prepend-path $tmp/haproxy-mod/?.so cpath
    lua-load-per-thread $PWD/contrib/haproxy/dthrottle_shared.lua
    lua-load-per-thread $tmp/true.lua
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
frontend off
    bind 127.0.0.1:$BASE
    $hello
frontend true-deny
    bind 127.0.0.1:$((BASE + 1))
    http-request deny deny_status 429 unless { src,lua.bench_true -m bool }
    $hello
frontend decide-deny
    bind 127.0.0.1:$((BASE + 2))
    http-request deny deny_status 429 unless { src,lua.dthrottle_decide -m bool }
    $hello
frontend shared
    bind 127.0.0.1:$((BASE + 3))
$(grep -E '^    http-request (lua\.dthrottle_resolve|return status 429)' contrib/haproxy/haproxy-shared.cfg)
    $hello
frontend true-action
    bind 127.0.0.1:$((BASE + 4))
    http-request lua.dthrottle_resolve unless { src,lua.bench_true -m bool }
    $hello
HAPROXY
/usr/sbin/haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
server=$!
pids+=("$server")
names=(off true-deny decide-deny shared true-action)
ports=("$BASE" $((BASE + 1)) $((BASE + 2)) $((BASE + 3)) $((BASE + 4)))
# shared first: its first request asks the daemon, which puts the tag in
# the table; decide-deny, which never asks, refuses a tag it does not hold.
for p in $((BASE + 3)) "${ports[@]}"; do
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.1; done
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/" || true)
	[ "$code" = 200 ] || { echo "haproxy-lua.sh: port $p answers $code" >&2; cat "$tmp/haproxy.log" >&2; exit 1; }
done
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	for k in "${!names[@]}"; do
		i=$(((k + r - 1) % ${#names[@]}))
		bench_wrk_cpu "$server" "${ports[$i]}"
		printf 'round %d  %-12s %10.0f req/s  HAProxy CPU %s us/request%s\n' "$r" "${names[$i]}" "$rps" "$cpu" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $cpu" >>"$tmp/results"
	done
done
echo
bench_medians "$tmp/results" "${names[@]}"
