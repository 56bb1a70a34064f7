#!/usr/bin/env bash
# bench/gohandler.sh: what client.Middleware costs a Go net/http handler
# that answers "hello\n", side by side in one run, `wrk -t2 -c64`:
#
#   off      the handler alone
#   shared   behind client.Middleware, deciding in process from
#            dthrottled's shared table (the client's default on a Unix
#            socket); each connection's first query is asked
#   socket   behind client.Middleware with Config.NoShare: every query
#            asked over the socket, pipelined
#
# All three are served by one process (bench/gohandler), on their own
# loopback ports; each wrk connection is its own tag (its address and
# port). The policy never refuses (burst 1,000,000 at 1e9 tokens per
# second), so the figure is the price of deciding. Runs are interleaved,
# each round starting one server further on. Printed: each run's
# requests/s, p99 and the server process's CPU per request, the clients'
# counts of the paths that decided, then the medians and the ratio to
# "off".
#
#   bench/gohandler.sh
#   ROUNDS=5 DURATION=10s bench/gohandler.sh
#
# Needs wrk and curl.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28180} # ports BASE to BASE+2 on 127.0.0.1

for tool in wrk curl; do
	command -v "$tool" >/dev/null || { echo "gohandler.sh: $tool not found (apt-get install -y wrk curl)" >&2; exit 1; }
done
. bench/lib.sh
bench_tmp gohandler-bench

go build -o "$tmp/dthrottled" ./cmd/dthrottled
go build -o "$tmp/gohandler" ./bench/gohandler
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
[limit]
rate = 1e9
burst = 1000000
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/d.sock" ] && break; sleep 0.05; done
"$tmp/gohandler" -sock "$tmp/d.sock" -off "127.0.0.1:$BASE" -shared "127.0.0.1:$((BASE + 1))" \
	-socket "127.0.0.1:$((BASE + 2))" >"$tmp/gohandler.out" 2>"$tmp/gohandler.log" &
server=$!
pids+=("$server")

names=(off shared socket)
ports=("$BASE" $((BASE + 1)) $((BASE + 2)))
bench_await gohandler.sh "${ports[@]}"
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	for k in "${!names[@]}"; do
		i=$(((k + r - 1) % ${#names[@]}))
		bench_wrk_cpu "$server" "${ports[$i]}"
		printf 'round %d  %-8s %10.0f req/s  p99 %-8s server CPU %s us/request%s\n' "$r" "${names[$i]}" "$rps" "$p99" "$cpu" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $cpu" >>"$tmp/results"
	done
done
kill "$server"
wait "$server" 2>/dev/null || true
cat "$tmp/gohandler.out"
echo
bench_medians "$tmp/results" "${names[@]}"
