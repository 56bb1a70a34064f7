#!/usr/bin/env bash
# bench/compare.sh: dthrottled side by side with the I/O ceiling (a bare Go
# echo server) and Redis running a leaky-bucket Lua script, as
# docs/performance.md reports. It builds dthrottled and dthrottle-load, starts
# dthrottled (gossip off, GODEBUG=gctrace=1) and redis-server
# (--save '' --appendonly no) on temporary Unix sockets, runs
# `dthrottle-load compare` (which starts the echo server itself), then
# summarises dthrottled's garbage collections and stops everything.
#
#   bench/compare.sh                 # the three scenarios, 3 interleaved runs
#   bench/compare.sh -scaling        # also 1k / 100k / 1M tags x 1, 32, 4x64
#   bench/compare.sh -sensitivity    # also echo servers spending 10-100 ns of CPU per query
#   RATE=1 BURST=10 bench/compare.sh # a realistic policy: mostly NO
#   DTHROTTLED=/path/to/dthrottled bench/compare.sh
#                                    # another build, such as an older
#                                    # version's, instead of this tree's
#
# Extra arguments go to `dthrottle-load compare` (see -h). Needs
# redis-server (Debian: apt-get install -y redis-server).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-2s}
TAGS=${TAGS:-1000000}
# Always OK by default: every query is a served hit, so the table does its
# full work (look up, update the bucket, count the hit, list it for the
# report), and a key stays in Redis for 100 s after each hit (the time its
# bucket takes to refill), so the prefilled tags stay there too.
RATE=${RATE:-0.01}
BURST=${BURST:-1000000}
MAX_TAGS=${MAX_TAGS:-2000000}

command -v redis-server >/dev/null || { echo "compare.sh: redis-server not found (apt-get install -y redis-server)" >&2; exit 1; }

. bench/lib.sh
bench_tmp bench

if [ -n "${DTHROTTLED:-}" ]; then
	cp "$DTHROTTLED" "$tmp/dthrottled"
else
	go build -o "$tmp/dthrottled" ./cmd/dthrottled
fi
go build -o "$tmp/dthrottle-load" ./cmd/dthrottle-load

cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0600"
max_conns = 1000
[limit]
rate = $RATE
burst = $BURST
max_tags = $MAX_TAGS
TOML

GODEBUG=gctrace=1 "$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
dpid=$!
pids+=("$dpid")
redis-server --port 0 --unixsocket "$tmp/r.sock" --unixsocketperm 700 \
	--save '' --appendonly no --daemonize no --logfile "$tmp/redis.log" &
rpid=$!
pids+=("$rpid")

# Wait for both sockets, at most 10 s.
for _ in $(seq 100); do
	[ -S "$tmp/d.sock" ] && [ -S "$tmp/r.sock" ] && break
	sleep 0.1
done
[ -S "$tmp/d.sock" ] || { cat "$tmp/dthrottled.log" >&2; echo "compare.sh: dthrottled did not start" >&2; exit 1; }
[ -S "$tmp/r.sock" ] || { cat "$tmp/redis.log" >&2; echo "compare.sh: redis-server did not start" >&2; exit 1; }

bench_steal_start

echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(redis-server --version | cut -d' ' -f3)"
echo "# dthrottled: rate $RATE, burst $BURST, max_tags $MAX_TAGS; redis: the same bucket in Lua (cmd/dthrottle-load/leaky_bucket.lua)"
echo
"$tmp/dthrottle-load" compare -dthrottle "unix:$tmp/d.sock" -dthrottle-pid "$dpid" \
	-redis "unix:$tmp/r.sock" -redis-pid "$rpid" -runs "$RUNS" -duration "$DURATION" \
	-big "$TAGS" -rate "$RATE" -burst "$BURST" "$@"

echo
bench_steal ""

# gctrace lines: "gc N @T s P%: A+B+C ms clock, ...": A and C stop the world.
echo
awk '/^gc [0-9]+ @/ {
	split($5, c, "+"); n++
	if (c[1] > s1) s1 = c[1]; if (c[3] > s3) s3 = c[3]; if (c[2] > mk) mk = c[2]
	for (i = 1; i <= NF; i++) if ($i ~ /->.*->/) heap = $i
} END {
	printf "dthrottled GC over the whole run: %d cycles; longest stop-the-world pauses %.3f ms (sweep termination) and %.3f ms (mark termination); longest concurrent mark %.1f ms; heap at the last cycle %s MB\n", n, s1, s3, mk, heap
}' "$tmp/dthrottled.log"
