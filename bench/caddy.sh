#!/usr/bin/env bash
# bench/caddy.sh: what throttling costs Caddy serving a 6-byte static file
# to wrk with 64 concurrent keep-alive connections, when it decides in its
# own process from dthrottled's shared table. Two Caddys of the same
# version and dependencies, both built by contrib/caddy/build.sh: one
# without the module (-bare) and one with it. Side by side, interleaved
# rounds:
#
#   bare      the bare Caddy serving the file alone: the reference
#   off       the Caddy with the module, serving the file alone (what
#             carrying the module costs when unused)
#   shared    the Caddy with the module on contrib/caddy/Caddyfile.shared:
#             every request spends a token of a tag never exhausted
#             (burst 1,000,000, rate 1e6), decided in Caddy's process
#   fwd       a third Caddy, bare, on contrib/caddy/Caddyfile: forward_auth
#             to dthrottled's HTTP decision endpoint on TCP, for reference
#
# The rate is 1e6, not 1e9: at 1e9 a full bucket of 1,000,000 tokens is
# 1 ms ahead of the clock, and a decision whose reading of the clock is
# over 1 ms old when it spends (its thread preempted in between, on a
# loaded machine) is refused: a few 429s per 100,000 requests.
#
# Printed: requests/s, the 99th percentile latency and Caddy's own CPU time
# per request (dthrottled's not counted) of each run; then the medians and
# each one's ratio to bare; then how many of the shared site's requests the
# daemon was asked over its socket (the first of its tag, and the
# readiness checks) against those it counted decided. On two cores shared
# with wrk, and with other work, requests/s swing by tens of percent from
# run to run; compare within one run.
#
#   bench/caddy.sh                   # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s bench/caddy.sh
#
# Needs Go and the Go module proxy (the builds: a few minutes the first
# time, seconds after), wrk and curl (Debian: apt-get install -y wrk curl).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28380} # ports BASE to BASE+6 on 127.0.0.1, below the ephemeral range

for tool in go wrk curl; do
	command -v "$tool" >/dev/null || { echo "caddy.sh: $tool not found (apt-get install -y wrk curl)" >&2; exit 1; }
done
. bench/lib.sh
bench_tmp caddy
bench_www

go build -o "$tmp/dthrottled" ./cmd/dthrottled
contrib/caddy/build.sh "$tmp/caddy-dthrottle"
contrib/caddy/build.sh -bare "$tmp/caddy-bare"

cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
[limit]
rate = 1e6
burst = 1000000
[http]
listen = "127.0.0.1:$((BASE + 4))"
refuse_status = 429
[admin]
http = "127.0.0.1:$((BASE + 6))"
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
pids+=($!)

# The bare Caddy: the file alone on BASE+0; a second one, forward_auth on
# BASE+3 (its fail-open site on BASE+5).
printf '{\n\tadmin off\n}\n\nhttp://127.0.0.1:%d {\n\troot * %s\n\tfile_server\n}\n' $((BASE + 0)) "$tmp/www" >"$tmp/bare.Caddyfile"
{
	printf '{\n\tadmin off\n}\n\n'
	sed -n '/^:8080 {/,$p' contrib/caddy/Caddyfile |
		sed -e "s|^:8080 {|http://127.0.0.1:$((BASE + 3)) {|" -e "s|root \* /var/www/html|root * $tmp/www|" \
			-e "s|127.0.0.1:7073|127.0.0.1:$((BASE + 5))|g" -e "s|forward_auth 127.0.0.1:7072 |forward_auth 127.0.0.1:$((BASE + 4)) |"
} >"$tmp/fwd.Caddyfile"
# The Caddy with the module: the file alone on BASE+1, Caddyfile.shared on
# BASE+2.
{
	sed -e "s|^:8080 {|http://127.0.0.1:$((BASE + 2)) {|" -e "s|root \* /var/www/html|root * $tmp/www|" \
		-e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" contrib/caddy/Caddyfile.shared
	printf '\nhttp://127.0.0.1:%d {\n\troot * %s\n\tfile_server\n}\n' $((BASE + 1)) "$tmp/www"
} >"$tmp/dthrottle.Caddyfile"
for c in bare:bare dthrottle:dthrottle fwd:bare; do
	IFS=: read -r conf bin <<<"$c"
	HOME=$tmp XDG_DATA_HOME=$tmp XDG_CONFIG_HOME=$tmp "$tmp/caddy-$bin" run --config "$tmp/$conf.Caddyfile" --adapter caddyfile >"$tmp/caddy-$conf.log" 2>&1 &
	pids+=($!)
	eval "pid_$conf=$!"
done

names=(bare off shared fwd)
ports=($((BASE + 0)) $((BASE + 1)) $((BASE + 2)) $((BASE + 3)))
cpu_pids=("$pid_bare" "$pid_dthrottle" "$pid_dthrottle" "$pid_fwd")
bench_await caddy.sh "${ports[@]}"
# The decisions the daemon counts, and the requests it was asked over its
# socket.
counts() {
	curl -s "http://127.0.0.1:$((BASE + 6))/metrics" |
		awk '/^dthrottle_queries_total/ { d += $2 } /^dthrottle_requests_total/ { s = $2 } END { printf "%d %d\n", d, s }'
}
read -r decided0 socket0 < <(counts)

echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); caddy $("$tmp/caddy-bare" version | cut -d' ' -f1); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	# Each round starts one site further on, so that none always runs
	# first (after the others' load) or last.
	for k in "${!names[@]}"; do
		i=$(((k + r - 1) % ${#names[@]}))
		bench_wrk_cpu "${cpu_pids[$i]}" "${ports[$i]}"
		printf 'round %d  %-7s %10.0f req/s  p99 %-8s caddy CPU %s us/request%s\n' "$r" "${names[$i]}" "$rps" "$p99" "$cpu" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $p99 $cpu" >>"$tmp/results"
		case ${names[$i]} in
		shared) shared_reqs=$((${shared_reqs:-0} + reqs)) ;;
		fwd) fwd_reqs=$((${fwd_reqs:-0} + reqs)) ;;
		esac
	done
done
read -r decided1 socket1 < <(counts)
# Only shared and fwd reach the daemon, fwd over HTTP, which the socket's
# count leaves out: every request to shared was decided in Caddy's process
# when the socket was asked nothing (the tag's first request, asked, was
# the readiness check's).
echo "the daemon decided $((decided1 - decided0)) queries and was asked $((socket1 - socket0)) over its socket; wrk counted $shared_reqs requests to shared and $fwd_reqs to fwd"
echo
echo "| site | req/s (median) | against bare | p99 (median) | caddy CPU us/request (median) |"
echo "|---|---|---|---|---|"
awk '
	function us(x) { return x ~ /us$/ ? x + 0 : x ~ /ms$/ ? x * 1000 : x * 1000000 }
	{ n[$1]++; rps[$1, n[$1]] = $2; p99[$1, n[$1]] = us($3); cpu[$1, n[$1]] = $4 }
	function med(arr, name,   k, i, j, t, a) {
		k = n[name]
		for (i = 1; i <= k; i++) a[i] = arr[name, i]
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((k + 1) / 2)]
	}
	END {
		b = med(rps, "bare")
		split("bare off shared fwd", order, " ")
		for (i = 1; i <= 4; i++) {
			s = order[i]; x = med(rps, s)
			printf "| %s | %.0f | %.2fx | %.2fms | %.2f |\n", s, x, x / b, med(p99, s) / 1000, med(cpu, s)
		}
	}
' "$tmp/results"
