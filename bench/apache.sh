#!/usr/bin/env bash
# bench/apache.sh: what throttling costs Apache httpd 2.4 (event MPM)
# serving a small static file to `ab -k -c 64`, side by side in one run:
#
#   none        Apache without throttling
#   module      mod_dthrottle (contrib/apache) as installed: dthrottled
#               shares its table (the default), so every child decides in
#               process; only the tag's first query is asked
#   socket      mod_dthrottle against a dthrottled with [listen]
#               share_table = false: every child asks every query over the
#               socket (the module before the shared table)
#   floor       mod_dthrottle asking a 40-line C epoll server that answers
#               "OK\n" to every line (and shares nothing): what the
#               socket's round trip costs Apache with a daemon that costs
#               (next to) nothing
#   rewritemap  the configuration-only path: mod_rewrite's RewriteMap
#               "prg:dthrottle rewritemap" (contrib/apache/dthrottle.conf)
#
# The policy never refuses (burst 1,000,000 at a million tokens per
# second: a second's worth of burst, which ab does not come near), so
# every request is served: the figure is the price of deciding. (A burst
# worth a millisecond, as at rate 1e9, would refuse now and then: a thread
# whose clock reading is older than a millisecond when it decides, after a
# preemption, finds the bucket ahead of it.) The servers run at once on
# their own loopback ports, against two dthrottled on Unix sockets (one
# sharing its table, one not); the runs are interleaved (none, module,
# socket, ..., none, ...) so the machine's load falls on all alike.
# Printed: requests/s and the 99th percentile latency (ab's, in whole ms)
# of each run, then the median requests/s of each server and its ratio to
# "none".
#
#   bench/apache.sh                   # 3 rounds of 100,000 requests each
#   ROUNDS=5 REQUESTS=200000 bench/apache.sh
#   CONCURRENCY=16 bench/apache.sh
#   SERVERS="none module" ROUNDS=7 bench/apache.sh   # only these (none: the base)
#
# Needs apache2, apxs (Debian: apache2-dev) and ab (apache2-utils). As root
# Apache's children run as www-data (or nobody).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-100000}
CONCURRENCY=${CONCURRENCY:-64}
APACHE=${APACHE:-/usr/sbin/apache2}
MODULES=${MODULES:-/usr/lib/apache2/modules}

for tool in "$APACHE" apxs ab; do
	command -v "$tool" >/dev/null || { echo "apache.sh: $tool not found (Debian: apt-get install -y apache2 apache2-dev apache2-utils)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/dthrottle-apache-bench.XXXXXX)
chmod 755 "$tmp"
pids=()
confs=()
cleanup() {
	for c in "${confs[@]}"; do "$APACHE" -f "$c" -k stop 2>/dev/null || true; done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	# Give the stopped servers a moment to remove their pid files.
	for c in "${confs[@]}"; do
		for _ in $(seq 50); do [ -e "$(dirname "$c")/httpd.pid" ] || break; sleep 0.1; done
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/dthrottled" ./cmd/dthrottled
go build -o "$tmp/dthrottle" ./cmd/dthrottle
# The module with libdthrottle compiled in, built in a copy of both
# directories (apxs leaves its objects beside the sources).
mkdir -p "$tmp/mod/contrib/apache" "$tmp/mod/libdthrottle"
cp contrib/apache/*.c contrib/apache/*.h contrib/apache/mod_dthrottle.map "$tmp/mod/contrib/apache/"
cp libdthrottle/libdthrottle.c libdthrottle/dthrottle_*.[ch] "$tmp/mod/libdthrottle/"
(cd "$tmp/mod/contrib/apache" && apxs -c -Wc,-Wall -Wc,-Werror -Wc,-O2 -Wl,-Wl,--version-script=mod_dthrottle.map \
	mod_dthrottle.c dthrottle_client.c dthrottle_target.c dthrottle_status.c dthrottle_shared.c \
	../../libdthrottle/libdthrottle.c >build.log 2>&1) ||
	{ cat "$tmp/mod/contrib/apache/build.log" >&2; exit 1; }

cat >"$tmp/floor.c" <<'C'
/* floor: answer "OK\n" to every line, on a Unix socket, one thread. */
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct epoll_event ev = {.events = EPOLLIN}, evs[64];
    static char in[65536], out[3 * 65536];
    int l = socket(AF_UNIX, SOCK_STREAM, 0), ep = epoll_create1(0);

    strncpy(a.sun_path, argv[1], sizeof(a.sun_path) - 1);
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1024) != 0)
        return 1;
    chmod(argv[1], 0666);
    ev.data.fd = l;
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd, o = 0;
            ssize_t k;
            if (fd == l) {
                ev.data.fd = accept(l, NULL, NULL);
                epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev);
                continue;
            }
            if ((k = read(fd, in, sizeof(in))) <= 0) {
                close(fd);
                continue;
            }
            for (ssize_t j = 0; j < k; j++)
                if (in[j] == '\n') {
                    memcpy(out + o, "OK\n", 3);
                    o += 3;
                }
            if (o > 0 && write(fd, out, o) != o)
                close(fd);
        }
    }
}
C
cc -O2 -o "$tmp/floor-server" "$tmp/floor.c"
"$tmp/floor-server" "$tmp/floor.sock" &
pids+=($!)

mkdir -m 755 "$tmp/www"
echo "hello" >"$tmp/www/index.html"
chmod 644 "$tmp/www/index.html"

# start_daemon NAME SHARE starts dthrottled on $tmp/NAME.sock, sharing its table
# or not (SHARE: true or false).
start_daemon() {
	cat >"$tmp/$1.toml" <<TOML
[listen]
unix = "$tmp/$1.sock"
unix_mode = "0666"
max_conns = 10000
share_table = $2
[limit]
rate = 1e6
burst = 1000000
TOML
	"$tmp/dthrottled" -config "$tmp/$1.toml" 2>"$tmp/$1.log" &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$tmp/$1.sock" ] && break; sleep 0.05; done
	[ -S "$tmp/$1.sock" ] || { cat "$tmp/$1.log" >&2; exit 1; }
}
start_daemon d true
start_daemon d-socket false

user=""
if [ "$(id -u)" = 0 ]; then
	if id www-data >/dev/null 2>&1; then u=www-data; else u=nobody; fi
	user="User $u
Group #$(id -g "$u")"
fi

# apache NAME PORT EXTRA writes and starts one server; EXTRA is its
# throttling configuration.
apache() {
	local name=$1 port=$2 extra=$3 dir="$tmp/$1"
	mkdir -m 755 "$dir"
	cat >"$dir/httpd.conf" <<CONF
ServerRoot $dir
ServerName 127.0.0.1
LoadModule mpm_event_module $MODULES/mod_mpm_event.so
LoadModule authz_core_module $MODULES/mod_authz_core.so
LoadModule dir_module $MODULES/mod_dir.so
LoadModule rewrite_module $MODULES/mod_rewrite.so
LoadModule headers_module $MODULES/mod_headers.so
LoadModule dthrottle_module $tmp/mod/contrib/apache/.libs/mod_dthrottle.so
$user
Listen 127.0.0.1:$port
PidFile $dir/httpd.pid
ErrorLog $dir/error.log
DefaultRuntimeDir $dir
Mutex file:$dir default
KeepAlive On
MaxKeepAliveRequests 0
DocumentRoot $tmp/www
DirectoryIndex index.html
<VirtualHost 127.0.0.1:$port>
DocumentRoot $tmp/www
$extra
</VirtualHost>
CONF
	confs+=("$dir/httpd.conf")
	"$APACHE" -f "$dir/httpd.conf" -k start || { cat "$dir/error.log" >&2; exit 1; }
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A ports
ports[none]=$(port)
apache none "${ports[none]}" ""
ports[module]=$(port)
# A long timeout: on a saturated machine some queries wait more than the
# default 5 ms, and a query that times out is served without asking (fail
# open), which would flatter the figure. The counters at the end say how
# many failed.
apache module "${ports[module]}" "DThrottle On
DThrottleSocket $tmp/d.sock
DThrottleTimeout 1s
<Location /dthrottle-status>
	DThrottle Off
	SetHandler dthrottle-status
</Location>"
ports[socket]=$(port)
apache socket "${ports[socket]}" "DThrottle On
DThrottleSocket $tmp/d-socket.sock
DThrottleTimeout 1s
<Location /dthrottle-status>
	DThrottle Off
	SetHandler dthrottle-status
</Location>"
ports[floor]=$(port)
apache floor "${ports[floor]}" "DThrottle On
DThrottleSocket $tmp/floor.sock
DThrottleTimeout 1s"
ports[rewritemap]=$(port)
sed -e "s|/usr/local/bin/dthrottle rewritemap|$tmp/dthrottle rewritemap|" \
	-e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" contrib/apache/dthrottle.conf >"$tmp/rewritemap.conf"
apache rewritemap "${ports[rewritemap]}" "$(cat "$tmp/rewritemap.conf" contrib/apache/dthrottle-vhost.conf)"

servers=${SERVERS:-none module socket floor rewritemap}
for name in $servers; do
	for _ in $(seq 100); do
		curl -fs -o /dev/null "http://127.0.0.1:${ports[$name]}/index.html" 2>/dev/null && break
		sleep 0.05
	done
done

# cpu_ticks PATTERN prints the CPU time (clock ticks) used so far by the
# processes whose command line matches PATTERN, with their reaped children.
cpu_ticks() {
	local total=0 pid f
	for pid in $(pgrep -f -- "$1"); do
		f=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
		# Fields after the command: utime stime cutime cstime are 12-15.
		total=$((total + $(awk '{print $12 + $13 + $14 + $15}' <<<"$f")))
	done
	echo "$total"
}
ctxt() { awk '$1 == "ctxt" {print $2}' /proc/stat; }
hz=$(getconf CLK_TCK)

declare -A rps
echo "ab -k -c $CONCURRENCY -n $REQUESTS, $ROUNDS interleaved rounds"
# ab counts as "failed" a response whose length differs from the first's;
# with -k a few happen in every configuration alike. CPU is in microseconds
# per request: Apache (all its processes), the daemon asked (its own
# dthrottled, or the floor's C server), the map program, ab;
# switches are the machine's context switches per request.
printf '%-11s %5s %11s %6s %6s | %7s %7s %7s %7s %8s\n' server round requests/s p99_ms failed \
	apache daemon map ab switches
for round in $(seq "$ROUNDS"); do
	for name in $servers; do
		case $name in
		floor) daemon="$tmp/floor-server" ;;
		socket) daemon="$tmp/dthrottled -config $tmp/d-socket.toml" ;;
		*) daemon="$tmp/dthrottled -config $tmp/d.toml" ;;
		esac
		a0=$(cpu_ticks "$tmp/$name/httpd.conf"); d0=$(cpu_ticks "$daemon")
		m0=$(cpu_ticks "$tmp/dthrottle rewritemap"); s0=$(ctxt)
		out=$( { TIMEFORMAT='%U %S'; time ab -q -k -c "$CONCURRENCY" -n "$REQUESTS" \
			"http://127.0.0.1:${ports[$name]}/index.html"; } 2>&1)
		s1=$(ctxt); a1=$(cpu_ticks "$tmp/$name/httpd.conf"); d1=$(cpu_ticks "$daemon")
		m1=$(cpu_ticks "$tmp/dthrottle rewritemap")
		r=$(awk '/^Requests per second:/ {print $4}' <<<"$out")
		p=$(awk '$1 == "99%" {print $2}' <<<"$out")
		failed=$(awk '/^Failed requests:/ {print $3}' <<<"$out")
		non2xx=$(awk '/^Non-2xx responses:/ {print $3}' <<<"$out")
		abcpu=$(tail -n 1 <<<"$out")
		[ -n "$r" ] && [ -z "$non2xx" ] ||
			{ echo "apache.sh: $name: ${non2xx:-0} non-2xx responses" >&2; echo "$out" >&2; exit 1; }
		if [ "$name" != rewritemap ]; then m1=$m0; fi
		awk -v n="$name" -v round="$round" -v r="$r" -v p="$p" -v f="$failed" -v hz="$hz" -v req="$REQUESTS" \
			-v a=$((a1 - a0)) -v d=$((d1 - d0)) -v m=$((m1 - m0)) -v ab="$abcpu" -v s=$((s1 - s0)) \
			'BEGIN { split(ab, t, " "); us = 1e6 / req
				printf "%-11s %5s %11s %6s %6s | %7.1f %7.1f %7.1f %7.1f %8.2f\n", n, round, r, p, f,
					a / hz * us, d / hz * us, m / hz * us, (t[1] + t[2]) * us, s / req }'
		rps[$name]+="$r "
	done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
base=$(median <<<"${rps[none]}")
echo
printf '%-11s %14s %8s\n' server median_req/s ratio
for name in $servers; do
	m=$(median <<<"${rps[$name]}")
	printf '%-11s %14.0f %8.2f\n' "$name" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {print a / b}')"
done
echo
# PROFILE=1: where the CPU goes while mod_dthrottle is measured: perf over
# the whole machine for one more run, by process and by function.
if [ -n "${PROFILE:-}" ] && command -v perf >/dev/null; then
	echo "perf, one more mod_dthrottle run: CPU by command and by kernel or user space"
	perf record -q -a -g -o "${PERF_DATA:-$tmp/perf.data}" -- ab -q -k -c "$CONCURRENCY" -n "$REQUESTS" \
		"http://127.0.0.1:${ports[module]}/index.html" >/dev/null 2>&1
	perf report -i "${PERF_DATA:-$tmp/perf.data}" --no-children --sort comm,dso -g none -q 2>/dev/null | grep . | head -10 || true
	echo "-- apache2's top functions"
	perf report -i "${PERF_DATA:-$tmp/perf.data}" --no-children --comm apache2 --sort dso,sym -g none -q 2>/dev/null | grep . | head -15 || true
	echo "-- dthrottled's top functions"
	perf report -i "${PERF_DATA:-$tmp/perf.data}" --no-children --comm dthrottled --sort sym -g none -q 2>/dev/null | grep . | head -10 || true
	echo
fi
# A query that timed out is served unasked (fail open), which costs less
# than asking: the counters say how many there were, and who decided
# (decided_shared: in process; asked: over the socket).
for name in module socket; do
	echo "mod_dthrottle counters, $name (failed_open and backed_off: served unasked):"
	curl -fs "http://127.0.0.1:${ports[$name]}/dthrottle-status"
done
