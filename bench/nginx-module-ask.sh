#!/usr/bin/env bash
# bench/nginx-module-ask.sh: what asking dthrottled costs nginx's native
# module (contrib/nginx/module) when every request brings a new tag (a
# flood of new client addresses: each tag's first request is asked over
# the socket), the module of the tree ("new") beside one built from the
# sources of a git revision ("old", BASE_REV, HEAD by default), in one
# run. Two nginx, one worker each, on their own loopback ports, the
# module loaded in each, and one dthrottled sharing its table, with a
# limit never reached (burst 1,000,000, rate 1e9). Two workloads, by wrk
# with 64 keep-alive connections: "flood", every request a tag never seen
# (a wrk Lua script: ?tag=<run>-<thread>-<n>, "dthrottle $arg_tag;"), all
# asked; "known", 16 tags the table holds, decided in process. Runs are
# alternated (old flood, new flood, old known, new known), ROUNDS rounds,
# so the machine's load falls on both alike. Printed per run: requests/s,
# the 99th percentile latency, and the CPU time (user and system) per
# request of nginx's worker and of dthrottled, in µs; then the medians;
# then each worker's counters (dthrottle_stats), whose failed should be 0
# (an ask answered by the fail mode was not asked).
#
#   bench/nginx-module-ask.sh                  # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s BASE_REV=HEAD~1 bench/nginx-module-ask.sh
#   OLD_SO=/tmp/old/ngx_http_dthrottle_module.so bench/nginx-module-ask.sh
#
# Needs nginx, wrk, cc, make and nginx's sources (Debian: apt-get install
# -y nginx nginx-dev wrk gcc make).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28180} # ports BASE+1 (old) and BASE+2 (new) on 127.0.0.1
BASE_REV=${BASE_REV:-HEAD}

for tool in /usr/sbin/nginx wrk cc make git; do
	command -v "$tool" >/dev/null || { echo "nginx-module-ask.sh: $tool not found (apt-get install -y nginx nginx-dev wrk gcc make)" >&2; exit 1; }
done
[ -x /usr/share/nginx/src/configure ] || { echo "nginx-module-ask.sh: no nginx sources (apt-get install -y nginx-dev)" >&2; exit 1; }

. bench/lib.sh
bench_tmp nginx-module-ask

bench_www

go build -o "$tmp/dthrottled" ./cmd/dthrottled
# new: built as its Makefile builds it, in contrib/nginx/module; old: from
# BASE_REV's sources, module and libdthrottle, in $tmp.
make -s -C contrib/nginx/module >"$tmp/new-build.log" 2>&1 || { cat "$tmp/new-build.log" >&2; exit 1; }
cp contrib/nginx/module/ngx_http_dthrottle_module.so "$tmp/new.so"
if [ -n "${OLD_SO:-}" ]; then
	cp "$OLD_SO" "$tmp/old.so"
else
	# BASE_REV's whole tree, so the module finds libdthrottle where that
	# revision kept it.
	mkdir -p "$tmp/old"
	git archive "$BASE_REV" | tar -x -C "$tmp/old"
	make -s -C "$tmp/old/contrib/nginx/module" >"$tmp/old-build.log" 2>&1 || { cat "$tmp/old-build.log" >&2; exit 1; }
	cp "$tmp/old/contrib/nginx/module/ngx_http_dthrottle_module.so" "$tmp/old.so"
fi

cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0666"
share_table = true
[limit]
rate = 1e9
burst = 1000000
max_tags = 4000000
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
dpid=$!
pids+=($dpid)
for _ in $(seq 100); do [ -S "$tmp/d.sock" ] && break; sleep 0.1; done

# nginx_conf NAME PORT: an nginx.conf for one worker with NAME.so, its
# pid and error log named NAME, the tag the query's tag argument.
nginx_conf() {
	cat <<NGINX
load_module $tmp/$1.so;
worker_processes 1;
error_log $tmp/$1-error.log notice;
pid $tmp/$1.pid;
events { worker_connections 1024; }
http {
    access_log off;
$(bench_nginx_temps)
    dthrottle_socket $tmp/d.sock;
    dthrottle_timeout 1s;
    server {
        listen 127.0.0.1:$2;
        root $tmp/www;
        location / { dthrottle \$arg_tag; try_files \$uri =404; }
        location = /stats { dthrottle off; dthrottle_stats; }
    }
}
NGINX
}
declare -A port master
port[old]=$((BASE + 1))
port[new]=$((BASE + 2))
for v in old new; do
	nginx_conf "$v" "${port[$v]}" >"$tmp/$v.conf"
	/usr/sbin/nginx -p "$tmp" -c "$tmp/$v.conf" -g 'daemon off;' 2>"$tmp/$v.log" &
	master[$v]=$!
	pids+=($!)
done
bench_await nginx-module-ask.sh "${port[old]}" "${port[new]}"

# wrk's Lua: a new tag per request, unique to the run and the thread.
cat >"$tmp/flood.lua" <<'LUA'
local threads = 0
function setup(thread)
	threads = threads + 1
	thread:set("id", threads)
end
function init(args)
	n = 0
	prefix = "/hello.txt?tag=" .. os.getenv("TAGS") .. "-" .. id .. "-"
end
function request()
	n = n + 1
	return wrk.format(nil, prefix .. n)
end
LUA
cat >"$tmp/known.lua" <<'LUA'
local n = 0
function request()
	n = n + 1
	return wrk.format(nil, "/hello.txt?tag=known-" .. (n % 16))
end
LUA
# The known tags into the table, through either.
for i in $(seq 0 15); do curl -s -o /dev/null "http://127.0.0.1:${port[new]}/hello.txt?tag=known-$i"; done

# cputicks PID: the user and system time of PID, in clock ticks.
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

results=$tmp/results
: >"$results"
printf '%-10s %5s %10s %9s %12s %14s\n' run round req/s p99 nginx-us/req dthrottled-us/req
for round in $(seq "$ROUNDS"); do
	for load in flood known; do
		for v in old new; do
			w=$(pgrep -P "${master[$v]}" | head -1)
			n0=$(cputicks "$w")
			d0=$(cputicks "$dpid")
			out=$(TAGS="r$round-$v-$RANDOM" wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$tmp/$load.lua" "http://127.0.0.1:${port[$v]}/")
			n1=$(cputicks "$w")
			d1=$(cputicks "$dpid")
			rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
			p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
			reqs=$(awk '/requests in/ {print $1}' <<<"$out")
			errs=$(awk '/Non-2xx/ {print $5}' <<<"$out")
			ncpu=$(awk -v t=$((n1 - n0)) -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
			dcpu=$(awk -v t=$((d1 - d0)) -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
			printf '%-10s %5s %10s %9s %12s %14s%s\n' "$load-$v" "$round" "$rps" "$p99" "$ncpu" "$dcpu" "${errs:+ (non-2xx: $errs)}"
			echo "$load-$v $rps $ncpu $dcpu" >>"$results"
		done
	done
done

echo
echo "| run | req/s (median) | nginx CPU us/request (median) | dthrottled CPU us/request (median) |"
echo "|---|---|---|---|"
awk '
	{ rps[$1, ++n[$1]] = $2; ng[$1, n[$1]] = $3; dt[$1, n[$1]] = $4; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
	function median(name, a,   c, i, j, t, v) {
		c = n[name]
		for (i = 1; i <= c; i++) v[i] = a[name, i]
		for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
		return v[int((c + 1) / 2)]
	}
	END { for (x = 1; x <= k; x++) printf "| %s | %.0f | %.2f | %.2f |\n", order[x], median(order[x], rps), median(order[x], ng), median(order[x], dt) }
' "$results"
echo
for v in old new; do
	echo "$v: $(curl -s "http://127.0.0.1:${port[$v]}/stats")"
done
