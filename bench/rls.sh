#!/usr/bin/env bash
# bench/rls.sh: dthrottled's rate limit service (envoy.service.ratelimit.v3,
# [rls]) side by side with the reference implementation
# (github.com/envoyproxy/ratelimit's service_cmd, backed by redis-server), as
# docs/performance.md reports ("Envoy's rate limit service").
#
# Both serve the same two limits in domain "bench", one bucket per
# descriptor value:
#   open=<value>   never exhausted: every call is allowed (the reference:
#                  1,000,000,000 per second; dthrottled: rate 1e9, burst
#                  1,000,000);
#   tight=<value>  1 per second: nearly every call is refused (the
#                  reference: 1 per second, a fixed window; dthrottled:
#                  rate 1, burst 1).
# Each measurement is `dthrottle-load rls`: one gRPC connection, INFLIGHT
# calls in flight, each call one descriptor of one entry, the values taken
# from VALUES distinct ones in random order. Rounds interleave the systems
# (RUNS rounds, each system and limit once per round, the order swapped
# every round); the table gives medians. CPU per decision is the servers'
# user+system time (/proc/PID/stat) over the measured window divided by
# the calls answered in it: for the reference, service_cmd and
# redis-server together. Beside them runs the floor (bench/rlsfloor): a
# server of the same service on google.golang.org/grpc's defaults that
# answers every call OK and decides nothing, what any service built on
# grpc-go spends per call; the reference's CPU per decision over the
# floor's is the most such a service could gain on the reference.
#
#   bench/rls.sh                     # 3 rounds of 5 s, 64 in flight, 1000 values
#   RUNS=5 DURATION=10s bench/rls.sh
#   TRANSPORT=tcp bench/rls.sh       # loopback TCP (ports REF_PORT, RLS_PORT)
#                                    # instead of Unix sockets
#   REF_ONLY=1 bench/rls.sh          # the reference alone (also the case
#                                    # when dthrottled does not know [rls])
#   FLOOR=0 bench/rls.sh             # without the floor
#   DTHROTTLED=/path/to/dthrottled bench/rls.sh
#
# The reference runs on its defaults (a pool of 10 Redis connections, no
# write buffering); its own settings pass through the environment, e.g.
# REDIS_PIPELINE_WINDOW=150us bench/rls.sh. Needs redis-server (installed
# with apt-get when missing and running as root) and the Go module proxy
# the first time, to build the reference (see rls_ref_build below).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
INFLIGHT=${INFLIGHT:-64}
VALUES=${VALUES:-1000}
TRANSPORT=${TRANSPORT:-unix}
REF_PORT=${REF_PORT:-18081}
RLS_PORT=${RLS_PORT:-18082}
REF_ONLY=${REF_ONLY:-}
FLOOR=${FLOOR:-1}
FLOOR_PORT=${FLOOR_PORT:-18083}

# The reference, pinned: it has no tagged release. Keep in step with
# rlsRefVersion in tests/rls_reference_test.go.
RLS_REF_MODULE=github.com/envoyproxy/ratelimit
RLS_REF_VERSION=v1.4.1-0.20260122083618-3fb702589d36

# rls_ref_build builds the reference's service_cmd and client_cmd once into
# $ref ($XDG_CACHE_HOME/dthrottle-rls-ref/VERSION, else ~/.cache/..., where
# the end-to-end test builds them too): `go mod download` gives the
# module's source in the module cache, read-only, so the build runs in a
# writable copy, with the module's own go.mod and go.sum. About a minute
# the first time on this machine with empty module and build caches (54 s,
# 80 s of CPU).
rls_ref_build() {
	local base=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
	ref=${base:-${TMPDIR:-/tmp}}/dthrottle-rls-ref/$RLS_REF_VERSION
	[ -x "$ref/service_cmd" ] && [ -x "$ref/client_cmd" ] && return
	local work dir
	mkdir -p "$(dirname "$ref")"
	work=$(mktemp -d "$(dirname "$ref")/build-XXXXXX")
	dir=$(cd "$work" && GOWORK=off GOFLAGS=-buildvcs=false go mod download -json "$RLS_REF_MODULE@$RLS_REF_VERSION" |
		sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -n "$dir" ] || { rm -rf "$work"; echo "rls.sh: go mod download $RLS_REF_MODULE@$RLS_REF_VERSION failed" >&2; exit 1; }
	cp -r "$dir" "$work/src"
	chmod -R u+w "$work/src"
	echo "# building $RLS_REF_MODULE@$RLS_REF_VERSION into $ref" >&2
	(cd "$work/src" && GOWORK=off GOFLAGS=-buildvcs=false go build -trimpath -o "$work/bin/" ./src/service_cmd ./src/client_cmd)
	mv -T "$work/bin" "$ref" 2>/dev/null || [ -x "$ref/client_cmd" ]
	rm -rf "$work"
}

if ! command -v redis-server >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server >&2
	else
		echo "rls.sh: redis-server not found (apt-get install -y redis-server)" >&2
		exit 1
	fi
fi

. bench/lib.sh
bench_tmp rls

rls_ref_build
if [ -n "${DTHROTTLED:-}" ]; then
	cp "$DTHROTTLED" "$tmp/dthrottled"
else
	go build -o "$tmp/dthrottled" ./cmd/dthrottled
fi
go build -o "$tmp/dthrottle-load" ./cmd/dthrottle-load
go build -o "$tmp/rlsfloor" ./bench/rlsfloor

if [ "$TRANSPORT" = tcp ]; then
	ref_addr=tcp:127.0.0.1:$REF_PORT
	rls_addr=tcp:127.0.0.1:$RLS_PORT
	rls_listen=127.0.0.1:$RLS_PORT
	ref_listen=(GRPC_HOST=127.0.0.1 GRPC_PORT="$REF_PORT")
	floor_addr=tcp:127.0.0.1:$FLOOR_PORT
	floor_listen=127.0.0.1:$FLOOR_PORT
else
	ref_addr=unix:$tmp/ref.sock
	rls_addr=unix:$tmp/rls.sock
	rls_listen=unix:$tmp/rls.sock
	ref_listen=(GRPC_UDS="$tmp/ref.sock")
	floor_addr=unix:$tmp/floor.sock
	floor_listen=unix:$tmp/floor.sock
fi

# The reference reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
mkdir -p "$tmp/runtime/ratelimit/config"
cat >"$tmp/runtime/ratelimit/config/bench.yaml" <<YAML
domain: bench
descriptors:
  - key: open
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: tight
    rate_limit:
      unit: second
      requests_per_unit: 1
YAML

# dthrottled: each descriptor is the tag rls:<domain>|<key>=<value>.
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0600"
[[policy]]
name = "open"
prefix = "rls:bench|open="
rate = 1e9
burst = 1000000
[[policy]]
name = "tight"
prefix = "rls:bench|tight="
rate = 1
burst = 1
[rls]
listen = "$rls_listen"
TOML

if [ -z "$REF_ONLY" ] && ! out=$("$tmp/dthrottled" -check -config "$tmp/dthrottle.toml" 2>&1); then
	case $out in
	*'unknown key "rls'*) echo "# dthrottled does not know [rls] yet: measuring the reference alone" >&2; REF_ONLY=1 ;;
	*) echo "$out" >&2; exit 1 ;;
	esac
fi

redis-server --port 0 --unixsocket "$tmp/r.sock" --unixsocketperm 700 \
	--save '' --appendonly no --daemonize no --logfile "$tmp/redis.log" &
rpid=$!
pids+=("$rpid")
for _ in $(seq 100); do [ -S "$tmp/r.sock" ] && break; sleep 0.1; done
[ -S "$tmp/r.sock" ] || { cat "$tmp/redis.log" >&2; echo "rls.sh: redis-server did not start" >&2; exit 1; }

# The reference's other listeners (HTTP, debug) on free loopback ports; no
# statsd.
env "${ref_listen[@]}" HOST=127.0.0.1 PORT=0 DEBUG_HOST=127.0.0.1 DEBUG_PORT=0 \
	USE_STATSD=false LOG_LEVEL=warn \
	RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	REDIS_SOCKET_TYPE=unix REDIS_URL="$tmp/r.sock" \
	"$ref/service_cmd" 2>"$tmp/ref.log" &
refpid=$!
pids+=("$refpid")

systems=(ref)
if [ -z "$REF_ONLY" ]; then
	"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
	dpid=$!
	pids+=("$dpid")
	systems+=(dthrottled)
fi
if [ "$FLOOR" = 1 ]; then
	"$tmp/rlsfloor" -listen "$floor_listen" 2>"$tmp/floor.log" &
	fpid=$!
	pids+=("$fpid")
	systems+=(floor)
fi

# Wait until every server answers a call, at most 10 s each.
for sys in "${systems[@]}"; do
	case $sys in
	ref) a=$ref_addr log=$tmp/ref.log ;;
	floor) a=$floor_addr log=$tmp/floor.log ;;
	*) a=$rls_addr log=$tmp/dthrottled.log ;;
	esac
	for i in $(seq 100); do
		"$tmp/dthrottle-load" rls -addr "$a" -domain bench -key open -values 1 -inflight 1 \
			-warmup 0 -duration 10ms >/dev/null 2>&1 && break
		[ "$i" = 100 ] && { cat "$log" >&2; echo "rls.sh: $sys does not answer on $a" >&2; exit 1; }
		sleep 0.1
	done
done

echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(redis-server --version | cut -d' ' -f3)"
echo "# reference: $RLS_REF_MODULE@$RLS_REF_VERSION on redis-server; $TRANSPORT; $INFLIGHT calls in flight on one connection, $VALUES values, $RUNS rounds of $DURATION"
echo

bench_steal_start

: >"$tmp/results"
for round in $(seq "$RUNS"); do
	bench_order "$round" "${systems[@]}"
	for key in open tight; do
		for sys in "${order[@]}"; do
			case $sys in
			ref) a=$ref_addr p=$refpid,$rpid ;;
			floor) a=$floor_addr p=$fpid ;;
			*) a=$rls_addr p=$dpid ;;
			esac
			"$tmp/dthrottle-load" rls -addr "$a" -pids "$p" -label "$sys $key" -domain bench -key "$key" \
				-values "$VALUES" -inflight "$INFLIGHT" -warmup "$WARMUP" -duration "$DURATION" | tee -a "$tmp/results"
		done
	done
done

echo
bench_steal "# "

# Medians per system and limit, then the table.
echo
awk -v systems="${systems[*]}" '
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function num(r) { return r >= 1e6 ? sprintf("%.2fM", r/1e6) : r >= 1e3 ? sprintf("%.1fk", r/1e3) : sprintf("%.0f", r) }
function us(x) { return x >= 1000 ? sprintf("%.2f ms", x/1000) : sprintf("%.0f µs", x) }
{
	k = $2 " " $3
	for (i = 4; i <= NF; i++) { split($i, kv, "="); v[k, kv[1]] = v[k, kv[1]] " " kv[2] }
}
END {
	n = split(systems, sys, " ")
	print "| limit | system | decisions/s | allowed | p50 | p99 | server CPU per decision | decisions per server CPU second |"
	print "|---|---|---|---|---|---|---|---|"
	for (li = 1; li <= 2; li++) {
		key = li == 1 ? "open" : "tight"
		for (s = 1; s <= n; s++) {
			k = sys[s] " " key
			r[s] = median(v[k, "rate"]); c[s] = median(v[k, "cpu_ns"]); p99[s] = median(v[k, "p99_us"])
			name = sys[s] == "ref" ? "reference + Redis" : sys[s] == "floor" ? "floor: grpc-go answering OK" : "dthrottled"
			idx[sys[s]] = s
			printf "| %s | %s | %s | %.1f%% | %s | %s | %.1f µs | %s |\n", key, name, num(r[s]) "/s",
				100 * median(v[k, "ok"]), us(median(v[k, "p50_us"])), us(p99[s]), c[s] / 1000, num(1e9 / c[s])
		}
		d = idx["dthrottled"]; f = idx["floor"]
		if (d) printf "| %s | dthrottled / reference | %.2fx | | | %.2fx | | **%.1fx** (target: at least 5x) |\n", key, r[d] / r[1], p99[d] / p99[1], c[1] / c[d]
		if (f) printf "| %s | floor / reference | %.2fx | | | %.2fx | | %.1fx (the most any grpc-go service could reach) |\n", key, r[f] / r[1], p99[f] / p99[1], c[1] / c[f]
	}
}' "$tmp/results"
