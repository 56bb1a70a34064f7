#!/usr/bin/env bash
# bench/spoe-cpu.sh: where the CPU goes when HAProxy asks dthrottled
# through SPOE. One HAProxy (two threads, as shipped) serves a small
# static response alone and through contrib/haproxy/haproxy-spoe.cfg, to
# wrk -t2 -c64, rounds interleaved; for each run, the CPU time of wrk,
# HAProxy and dthrottled per request, in microseconds. On a machine whose
# cores all three share, throughput is the inverse of their sum.
#
#   bench/spoe-cpu.sh                 # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s bench/spoe-cpu.sh
#
# Needs haproxy, wrk and curl.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
BASE=${BASE:-28280} # ports BASE+1 to BASE+3 on 127.0.0.1

. bench/lib.sh
bench_tmp spoe-cpu

go build -o "$tmp/dthrottled" ./cmd/dthrottled
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
[limit]
rate = 1e9
burst = 1000000
[spoe]
listen = "127.0.0.1:$((BASE + 3))"
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
dpid=$!
pids+=($dpid)
sed -e "s|/etc/haproxy/spoe-dthrottle.conf|$PWD/contrib/haproxy/spoe-dthrottle.conf|" -e "s|127.0.0.1:7074|127.0.0.1:$((BASE + 3))|" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 2))|" contrib/haproxy/haproxy-spoe.cfg >"$tmp/haproxy.cfg"
printf '\nfrontend off\n    bind 127.0.0.1:%d\n    default_backend app\n' $((BASE + 1)) >>"$tmp/haproxy.cfg"
/usr/sbin/haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
hpid=$!
pids+=($hpid)
for port in $((BASE + 1)) $((BASE + 2)); do
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done
sleep 1 # the health check marks the agent up

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c64 -d$DURATION"
echo "| round | path | req/s | wrk µs/req | HAProxy µs/req | dthrottled µs/req | total µs/req |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
	for name in off spoe; do
		port=$((BASE + 1)); [ $name = spoe ] && port=$((BASE + 2))
		d0=$(ticks $dpid) h0=$(ticks $hpid)
		TIMEFORMAT='%U %S'
		t=$({ time wrk -t2 -c64 -d"$DURATION" "http://127.0.0.1:$port/" >"$tmp/wrk.out"; } 2>&1)
		d1=$(ticks $dpid) h1=$(ticks $hpid)
		n=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
		rps=$(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.out")
		awk -v t="$t" -v n="$n" -v rps="$rps" -v h=$((h1 - h0)) -v d=$((d1 - d0)) -v hz="$hz" -v r="$r" -v name="$name" 'BEGIN {
			split(t, u, " "); w = (u[1] + u[2]) * 1e6 / n; hh = h * 1e6 / hz / n; dd = d * 1e6 / hz / n
			printf "| %d | %s | %.0f | %.1f | %.1f | %.1f | %.1f |\n", r, name, rps, w, hh, dd, w + hh + dd }'
	done
done
