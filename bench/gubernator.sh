#!/usr/bin/env bash
# bench/gubernator.sh: dthrottled's Gubernator API ([gubernator],
# pb.gubernator.V1) against a real Gubernator cluster, side by side, as
# docs/performance.md reports ("Gubernator's API: dthrottled against a
# Gubernator cluster").
#
# Three Gubernator nodes (cmd/gubernator of github.com/gubernator-io/
# gubernator/v2 at the version go.mod requires, v2.13.0, built by
# guber_build below; finding each other by member-list), a cluster of
# three dthrottled for each gossip interval of INTERVALS (reporting hits
# to each other as unicast peers) and three floors run at once, all
# inside a user and network namespace this script makes: nothing reaches
# the host's own interfaces. Each system meets the same load from
# bench/gubload, Gubernator's own Go client, its own process per run:
#
#   throughput  INFLIGHT calls in flight, BATCH rate limits a call (1 by
#               default, of consecutive keys), calls round
#               robin over the system's three nodes, KEYS keys in turn,
#               every request stating LIMIT hits a second (LEAKY_BUCKET,
#               burst LIMIT), far above what a key is asked, so nearly
#               every answer is UNDER_LIMIT; WARMUP, then DURATION
#               measured. CPU per decision is the three servers'
#               user+system time (/proc/PID/stat) over the window divided
#               by the decisions answered in it.
#   accuracy    one fresh key stating ACC_RATE a second, burst ACC_BURST,
#               offered OVER times that rate for ACC_DURATION, request k
#               to node k mod 3; what the cluster served beside what one
#               exact bucket serves of the same requests at the same
#               instants.
#
# for Gubernator's default behaviour (BATCHING: a node forwards each key
# to its owner), its GLOBAL behaviour (a node answers from its copy and
# the owner broadcasts every GUBER_GLOBAL_SYNC_WAIT, 100ms by default),
# and dthrottled at its default interval (1s) and at GLOBAL's (100ms).
# Beside them, throughput only, runs the floor (bench/guberfloor): the
# same API on google.golang.org/grpc's defaults answering every call
# UNDER_LIMIT and deciding nothing, what any server of the API built on
# grpc-go spends on a call. RUNS rounds, the order of the systems swapped
# every round; the table gives medians.
#
#   bench/gubernator.sh                       # about two minutes
#   RUNS=3 DURATION=10s ACC_DURATION=20s bench/gubernator.sh
#   BATCH=100 ACCURACY=0 bench/gubernator.sh  # 100 rate limits a call,
#                                             # throughput only
#   INTERVALS=1s bench/gubernator.sh          # one dthrottled cluster
#   FLOOR=0 bench/gubernator.sh               # without the floor
#   GUBERNATOR_ONLY=1 bench/gubernator.sh     # Gubernator alone (also the
#                                             # case when dthrottled does
#                                             # not know [gubernator])
#   DTHROTTLED=/path/to/dthrottled bench/gubernator.sh
#   BASELINE=/path/to/other/dthrottled BASELINE_NAME="before" \
#     bench/gubernator.sh                     # one more cluster, of another
#                                             # binary (an earlier commit's),
#                                             # at the first of INTERVALS
#
# Gubernator's own settings pass through the environment (GUBER_*). Needs
# unshare(1) with unprivileged user namespaces, ip(8), and the Go module
# proxy the first time, to fetch the module.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-1}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
INFLIGHT=${INFLIGHT:-64}
KEYS=${KEYS:-10000}
BATCH=${BATCH:-1}
LIMIT=${LIMIT:-1000}
ACC_RATE=${ACC_RATE:-100}
ACC_BURST=${ACC_BURST:-100}
ACC_DURATION=${ACC_DURATION:-10s}
OVER=${OVER:-10}
INTERVALS=${INTERVALS:-1s 100ms}
FLOOR=${FLOOR:-1}
ACCURACY=${ACCURACY:-1}
GUBERNATOR_ONLY=${GUBERNATOR_ONLY:-}

. bench/lib.sh

# guber_build builds Gubernator's server, cmd/gubernator of the module at
# the version go.mod requires (the load tool's client is the same
# module), once into $guber ($XDG_CACHE_HOME/dthrottle-gubernator/VERSION,
# else ~/.cache/...). `go install MODULE@VERSION` builds it with the
# module's own go.mod and go.sum: built inside this module, with its
# newer OpenTelemetry, the server stops at start ("conflicting Schema
# URL"). About four minutes the first time on this machine with empty
# module and build caches.
guber_build() {
	local base version
	version=$(go list -m -f '{{.Version}}' github.com/gubernator-io/gubernator/v2)
	base=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
	guber=${base:-${TMPDIR:-/tmp}}/dthrottle-gubernator/$version
	GUBERNATOR_VERSION=$version
	[ -x "$guber/gubernator" ] && return
	echo "# building github.com/gubernator-io/gubernator/v2/cmd/gubernator@$version into $guber" >&2
	mkdir -p "$guber"
	(cd "$tmp" && GOBIN=$guber GOFLAGS=-buildvcs=false go install "github.com/gubernator-io/gubernator/v2/cmd/gubernator@$version")
}

# Outside the namespace: build everything (the module proxy may be
# needed), then run this script again inside a new user and network
# namespace, where only lo exists.
if [ -z "${GUBERNATOR_BENCH_TMP:-}" ]; then
	bench_tmp gubernator
	guber_build
	cp "$guber/gubernator" "$tmp/gubernator"
	go build -o "$tmp/gubload" ./bench/gubload
	go build -o "$tmp/guberfloor" ./bench/guberfloor
	if [ -n "${DTHROTTLED:-}" ]; then
		cp "$DTHROTTLED" "$tmp/dthrottled"
	else
		go build -o "$tmp/dthrottled" ./cmd/dthrottled
	fi
	[ -z "${BASELINE:-}" ] || cp "$BASELINE" "$tmp/baseline"
	GUBERNATOR_BENCH_TMP=$tmp GUBERNATOR_VERSION=$GUBERNATOR_VERSION BASELINE=${BASELINE:+$tmp/baseline} \
		unshare --user --map-root-user --net -- bash bench/gubernator.sh "$@"
	exit
fi

# Inside the namespace.
tmp=$GUBERNATOR_BENCH_TMP
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done' EXIT
links=$(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
[ "$links" = "lo " ] || { echo "gubernator.sh: the namespace has interfaces besides lo: $links" >&2; exit 1; }
ip link set lo up
ip route replace 224.0.0.0/4 dev lo

# Gubernator: node N on 127.0.0.N (gRPC :1051, HTTP :1050, member-list
# :7946), every node told of the first. Member-list keeps one peer per IP
# address, and names a node by its host name, which Gubernator does not
# let one set: each node has an address and a UTS namespace of its own,
# named guberN. Tracing exports nothing (OTEL_TRACES_EXPORTER=none) where
# it would try a collector that is not there every few seconds.
gaddrs=() gpids=()
for n in 1 2 3; do
	env GUBER_GRPC_ADDRESS=127.0.0.$n:1051 GUBER_HTTP_ADDRESS=127.0.0.$n:1050 \
		GUBER_PEER_DISCOVERY_TYPE=member-list GUBER_MEMBERLIST_ADDRESS=127.0.0.$n:7946 \
		GUBER_MEMBERLIST_BIND_ADDRESS=127.0.0.$n:7946 GUBER_MEMBERLIST_KNOWN_NODES=127.0.0.1:7946 \
		GUBER_INSTANCE_ID=guber$n GUBER_LOG_LEVEL="${GUBER_LOG_LEVEL:-warn}" \
		OTEL_TRACES_EXPORTER="${OTEL_TRACES_EXPORTER:-none}" \
		unshare --uts -- sh -c "hostname guber$n && exec \"\$0\"" "$tmp/gubernator" >"$tmp/gubernator$n.log" 2>&1 &
	pids+=($!) gpids+=($!) gaddrs+=(127.0.0.$n:1051)
done

join() { local IFS=,; echo "$*"; }
declare -A addrs procs behavior name
addrs[default]=$(join "${gaddrs[@]}") procs[default]=$(join "${gpids[@]}") behavior[default]=batching
addrs[global]=${addrs[default]} procs[global]=${procs[default]} behavior[global]=global
name[default]="Gubernator, default (BATCHING)" name[global]="Gubernator, GLOBAL"
systems=(default global)

# dthrottled: a cluster of three for each of INTERVALS, cluster c's node
# N serving gRPC on 127.0.0.1:19c6N and reporting to the others from
# 127.0.0.1:19c7N; and, with BASELINE, one more cluster of that binary at
# the first of INTERVALS.
c=0
cluster() { # cluster BINARY SYSTEM NAME INTERVAL
	local bin=$1 sys=$2 label=$3 interval=$4 n m peers a=() p=()
	for n in 1 2 3; do
		peers=
		for m in 1 2 3; do [ "$m" = "$n" ] || peers+="${peers:+, }\"127.0.0.1:19${c}7$m\""; done
		cat >"$tmp/dthrottle$c$n.toml" <<TOML
[listen]
unix = "$tmp/d$c$n.sock"
unix_mode = "0600"
[gossip]
interval = "$interval"
peers = [$peers]
bind = "127.0.0.1:19${c}7$n"
[gubernator]
grpc = "127.0.0.1:19${c}6$n"
TOML
	done
	if [ -z "$GUBERNATOR_ONLY" ] && ! out=$("$bin" -check -config "$tmp/dthrottle${c}1.toml" 2>&1); then
		case $out in
		*'unknown key "gubernator'*) echo "# $bin does not know [gubernator] yet: measuring Gubernator alone" >&2; GUBERNATOR_ONLY=1 ;;
		*) echo "$out" >&2; exit 1 ;;
		esac
	fi
	[ -z "$GUBERNATOR_ONLY" ] || return 0
	for n in 1 2 3; do
		"$bin" -config "$tmp/dthrottle$c$n.toml" 2>"$tmp/dthrottled$c$n.log" &
		pids+=($!) p+=($!) a+=(127.0.0.1:19${c}6$n)
	done
	addrs[$sys]=$(join "${a[@]}") procs[$sys]=$(join "${p[@]}") behavior[$sys]=batching
	name[$sys]=$label
	systems+=("$sys")
	c=$((c + 1))
}
for interval in $INTERVALS; do
	cluster "$tmp/dthrottled" "dthrottled@$interval" "dthrottled, gossip.interval $interval" "$interval"
	[ -z "$GUBERNATOR_ONLY" ] || break
done
if [ -n "${BASELINE:-}" ] && [ -z "$GUBERNATOR_ONLY" ]; then
	interval=${INTERVALS%% *}
	cluster "$tmp/baseline" "baseline@$interval" "dthrottled ${BASELINE_NAME:-baseline}, gossip.interval $interval" "$interval"
fi

# The floor: three guberfloor on 127.0.0.1:1990N, throughput only.
if [ "$FLOOR" = 1 ]; then
	a=() p=()
	for n in 1 2 3; do
		"$tmp/guberfloor" -listen "127.0.0.1:1990$n" 2>"$tmp/floor$n.log" &
		pids+=($!) p+=($!) a+=(127.0.0.1:1990$n)
	done
	addrs[floor]=$(join "${a[@]}") procs[floor]=$(join "${p[@]}") behavior[floor]=batching
	name[floor]="floor: grpc-go answering UNDER_LIMIT"
	systems+=(floor)
fi

"$tmp/gubload" ready -addrs "${addrs[default]}" -peers 3 || { tail -n 20 "$tmp"/gubernator*.log >&2; exit 1; }
for sys in "${systems[@]:2}"; do
	"$tmp/gubload" ready -addrs "${addrs[$sys]}" || { tail -n 20 "$tmp"/dthrottled*.log "$tmp"/floor*.log >&2; exit 1; }
done

echo "# $(date -u +%FT%TZ), $(nproc) CPUs shared by the load tool and every server, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# gubernator $GUBERNATOR_VERSION: 3 nodes, member-list; dthrottled: 3 nodes a cluster, unicast peers; $RUNS round(s)"
echo "# throughput: $INFLIGHT calls in flight, $BATCH rate limit(s) a call, $KEYS keys, LEAKY_BUCKET $LIMIT/s burst $LIMIT, $DURATION after $WARMUP"
[ "$ACCURACY" != 1 ] || echo "# accuracy: one key at ${OVER}x of $ACC_RATE/s burst $ACC_BURST for $ACC_DURATION"
echo

bench_steal_start

: >"$tmp/results"
for round in $(seq "$RUNS"); do
	bench_order "$round" "${systems[@]}"
	for sys in "${order[@]}"; do
		"$tmp/gubload" run -addrs "${addrs[$sys]}" -pids "${procs[$sys]}" -behavior "${behavior[$sys]}" -label "$sys" \
			-keys "$KEYS" -batch "$BATCH" -limit "$LIMIT" -inflight "$INFLIGHT" -warmup "$WARMUP" -duration "$DURATION" | tee -a "$tmp/results"
		[ "$sys" = floor ] || [ "$ACCURACY" != 1 ] && continue
		"$tmp/gubload" accuracy -addrs "${addrs[$sys]}" -behavior "${behavior[$sys]}" -label "$sys" \
			-limit "$ACC_RATE" -burst "$ACC_BURST" -over "$OVER" -duration "$ACC_DURATION" | tee -a "$tmp/results"
	done
done

echo
bench_steal "# "
echo
for sys in "${systems[@]}"; do printf '%s\t%s\n' "$sys" "${name[$sys]}"; done >"$tmp/names"
awk -F'\t' -v systems="${systems[*]}" '
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function num(r) { return r >= 1e6 ? sprintf("%.2fM", r/1e6) : r >= 1e3 ? sprintf("%.1fk", r/1e3) : sprintf("%.0f", r) }
function ms(x) { return x >= 1000 ? sprintf("%.2f ms", x/1000) : sprintf("%.0f µs", x) }
function off(k) { return sprintf("%+.1f%%", 100 * (served[k] / exact[k] - 1)) }
FILENAME ~ /names$/ { name[$1] = $2; next }
{
	split($0, f, " ")
	for (i = 3; i in f; i++) { split(f[i], kv, "="); v[f[1], f[2], kv[1]] = v[f[1], f[2], kv[1]] " " kv[2] }
}
END {
	n = split(systems, sys, " ")
	print "| system | decisions/s | UNDER_LIMIT | p50 | p99 | server CPU per decision | decisions per server CPU second | accuracy: served | exact bucket | off the exact bucket | errors |"
	print "|---|---|---|---|---|---|---|---|---|---|---|"
	for (s = 1; s <= n; s++) {
		k = sys[s]
		c[k] = median(v["run", k, "cpu_ns"])
		acc = "| - | - | -"
		if (("accuracy", k, "served") in v) {
			served[k] = median(v["accuracy", k, "served"]); exact[k] = median(v["accuracy", k, "exact"])
			acc = sprintf("| %d of %d | %d (bound %d) | %s", served[k], median(v["accuracy", k, "sent"]), exact[k], median(v["accuracy", k, "bound"]), off(k))
		}
		printf "| %s | %s | %.1f%% | %s | %s | %.1f µs | %s %s | %d |\n", name[k],
			num(median(v["run", k, "rate"])) "/s", 100 * median(v["run", k, "under"]), ms(median(v["run", k, "p50_us"])),
			ms(median(v["run", k, "p99_us"])), c[k] / 1000, num(1e9 / c[k]), acc,
			median(v["run", k, "errors"]) + median(v["accuracy", k, "errors"])
	}
	for (s = 3; s <= n; s++) {
		d = sys[s]
		for (g = 1; g <= 2; g++) {
			k = sys[g]
			if (d == "floor") {
				if (g == 1) printf "| floor / %s | | | | | | %.1fx (the most any grpc-go server could reach) | | | | |\n", name[k], c[k] / c[d]
				continue
			}
			printf "| %s / %s | | | | | | **%.1fx** (target: at least 5x) | | | %s | |\n", name[d], name[k], c[k] / c[d],
				(d in served) ? off(d) " against " off(k) : ""
		}
	}
}' "$tmp/names" "$tmp/results"
