#!/usr/bin/env bash
# bench/proxies.sh: what throttling costs nginx, Caddy and HAProxy serving a
# small static response to wrk with 64 concurrent keep-alive connections,
# side by side in one run. For each proxy two servers run at once on their
# own loopback ports: "off", the proxy alone, and "on", the ready-to-copy
# configuration of contrib/ (each server's recommended way: nginx's
# native module, contrib/nginx/dthrottle-module.conf with
# ngx_http_dthrottle_module, and HAProxy's Lua C module,
# contrib/haproxy/haproxy-shared.cfg with dthrottle_shared.so, both
# deciding in process from the shared table; each server's way that
# needs no build: nginx auth_request and Caddy forward_auth to the HTTP
# decision endpoint, HAProxy's SPOE to dthrottled's agent,
# contrib/haproxy/haproxy-spoe.cfg; OpenResty's, the shared table
# through LuaJIT's FFI, contrib/nginx/dthrottle-shared.conf; and HAProxy
# deciding on its own stick table with dthrottled as the table's peer,
# contrib/haproxy/haproxy-peers.cfg, dthrottled's CPU per request
# printed beside it), every request
# spending a token of a tag that is never exhausted (burst 1,000,000, rate
# 1e9). Beside them, the proxies' own limiters, as anchors of what a
# limiter inside the proxy costs: nginx's limit_req (a zone keyed by
# $binary_remote_addr that never refuses) and an HAProxy stick table
# (http_req_rate tracked per source, with a deny rule that never fires);
# and nginx running an empty access_by_lua_block, HAProxy a Lua converter
# that answers true, what any Lua costs them before it decides anything.
# Runs are interleaved (nginx off, nginx on, caddy off, ...), each round
# starting one further on, so the machine's load falls on all alike.
# Printed: requests/s and the 99th percentile latency of each run, and the
# proxy's own CPU time per request (dthrottled's not counted;
# bench/spoe-cpu.sh counts it for SPOE); how many requests the shared
# paths decided in process and the SPOE agent answered, against wrk's
# counts, so that a request served unasked would show; then the median
# requests/s of each, the ratio to the same proxy alone, and the median
# CPU per request of both.
# On two cores shared with wrk, and with other work, requests/s swing by
# tens of percent from run to run; CPU per request swings less. Apache:
# bench/apache.sh.
#
#   bench/proxies.sh                 # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s bench/proxies.sh
#   ONLY=haproxy bench/proxies.sh    # only the servers whose name matches
#
# Needs nginx with libnginx-mod-http-lua, caddy, haproxy, wrk, and cc,
# make, nginx's sources and the Lua 5.3 headers for libdthrottle, nginx's
# module and HAProxy's (Debian: apt-get install -y nginx
# libnginx-mod-http-lua nginx-dev caddy haproxy wrk gcc make
# liblua5.3-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28080} # ports BASE to BASE+23 on 127.0.0.1, below the ephemeral range
ONLY=${ONLY:-}      # a regular expression: run only the servers whose name matches

for tool in /usr/sbin/nginx caddy /usr/sbin/haproxy wrk cc make; do
	command -v "$tool" >/dev/null || { echo "proxies.sh: $tool not found (apt-get install -y nginx libnginx-mod-http-lua caddy haproxy wrk gcc make liblua5.3-dev)" >&2; exit 1; }
done
[ -e /usr/include/lua5.3/lua.h ] || { echo "proxies.sh: no Lua 5.3 headers (apt-get install -y liblua5.3-dev)" >&2; exit 1; }
[ -x /usr/share/nginx/src/configure ] || { echo "proxies.sh: no nginx sources (apt-get install -y nginx-dev)" >&2; exit 1; }

. bench/lib.sh
bench_tmp proxies

bench_www

go build -o "$tmp/dthrottled" ./cmd/dthrottled
# libdthrottle (nginx's shared path loads it), HAProxy's module and
# nginx's (built as its Makefile builds it, in contrib/nginx/module).
bench_haproxy_module
make -s -C contrib/nginx/module >"$tmp/nginx-module-build.log" 2>&1 || { cat "$tmp/nginx-module-build.log" >&2; exit 1; }
cp contrib/nginx/module/ngx_http_dthrottle_module.so "$tmp/"
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0666"
[limit]
rate = 1e9
burst = 1000000
[http]
listen = "127.0.0.1:$((BASE + 7))"
refuse_status = 429
[spoe]
listen = "127.0.0.1:$((BASE + 8))"
[admin]
http = "127.0.0.1:$((BASE + 19))"
[haproxy]
listen = "127.0.0.1:$((BASE + 21))"
tables = ["web"]
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
pids+=($!)

# Ports: nginx BASE+1 (off) BASE+2 (on, auth_request) BASE+9 (on, shared
# table through the FFI) BASE+10 (limit_req) BASE+12 (an empty
# access_by_lua) BASE+17 (the native module; its worker's counters
# BASE+18), all in one nginx; caddy BASE+3 BASE+4 (fail-open BASE+5);
# haproxy BASE+6 (off) BASE+14 (shared table) BASE+0 (SPOE) BASE+11
# (stick table) BASE+15 (a Lua converter answering true) BASE+20 (the
# stick table with dthrottled as its peer; HAProxy's own peer address
# BASE+22, dthrottled's BASE+21) BASE+23 (the same rules on a table
# without a peer), all in one HAProxy; dthrottled's HTTP endpoint BASE+7, SPOE agent BASE+8, admin
# endpoint BASE+19; the shared paths' counters BASE+13 (nginx) BASE+16
# (HAProxy).
sed -e "s|listen 8080;|listen 127.0.0.1:$((BASE + 2));|" -e "s|root /var/www/html;|root $tmp/www;|" \
	-e "s|server 127.0.0.1:7072;|server 127.0.0.1:$((BASE + 7));|" contrib/nginx/dthrottle.conf >"$tmp/nginx-on.conf"
sed -e "s|listen 8080;|listen 127.0.0.1:$((BASE + 9));|" -e "s|root /var/www/html;|root $tmp/www;|" \
	-e "s|/etc/nginx/dthrottle/|$PWD/contrib/nginx/|" -e "s|/usr/local/lib/libdthrottle.so|$tmp/libdthrottle/libdthrottle.so|" \
	-e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" -e "s|rate = 1,|rate = 1e9,|" -e "s|burst = 10,|burst = 1000000,|" \
	contrib/nginx/dthrottle-shared.conf >"$tmp/nginx-shared.conf"
sed -e "s|listen 8080;|listen 127.0.0.1:$((BASE + 17));|" -e "s|root /var/www/html;|root $tmp/www;|" \
	-e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" contrib/nginx/dthrottle-module.conf >"$tmp/nginx-module.conf"
echo "server { listen 127.0.0.1:$((BASE + 18)); location / { dthrottle_stats; } }" >>"$tmp/nginx-module.conf"
# nginx_conf NAME INCLUDES...: an nginx.conf for one worker, its pid and
# error log named NAME, including the files given.
nginx_conf() {
	local name=$1 f
	shift
	cat <<NGINX
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
load_module $tmp/ngx_http_dthrottle_module.so;
worker_processes 1;
error_log $tmp/$name-error.log;
pid $tmp/$name.pid;
events { worker_connections 1024; }
http {
    access_log off;
$(bench_nginx_temps)
NGINX
	for f in "$@"; do echo "    include $f;"; done
	echo "}"
}
cat >"$tmp/nginx-servers.conf" <<NGINX
server { listen 127.0.0.1:$((BASE + 1)); root $tmp/www; location / { try_files \$uri =404; } }
limit_req_zone \$binary_remote_addr zone=bench:10m rate=1000000r/s;
server {
    listen 127.0.0.1:$((BASE + 10));
    root $tmp/www;
    location / {
        limit_req zone=bench burst=1000000 nodelay;
        try_files \$uri =404;
    }
}
server {
    listen 127.0.0.1:$((BASE + 12));
    root $tmp/www;
    location / {
        access_by_lua_block { }
        try_files \$uri =404;
    }
}
# The shared path's counters (one worker: all of them).
server {
    listen 127.0.0.1:$((BASE + 13));
    location / {
        content_by_lua_block {
            local s = require("dthrottle_shared").stats()
            ngx.say(s.ok + s.no, " decided in the worker, ", s.asked, " asked over the socket, ", s.failed, " answered by the fail mode")
        }
    }
}
NGINX
nginx_conf nginx "$tmp/nginx-servers.conf" "$tmp/nginx-on.conf" "$tmp/nginx-shared.conf" "$tmp/nginx-module.conf" >"$tmp/nginx.conf"
/usr/sbin/nginx -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.log" &
pids+=($!)
nginx_master=$!

sed -e "s|:8080 {|http://127.0.0.1:$((BASE + 4)) {|" -e "s|root \* /var/www/html|root * $tmp/www|" \
	-e "s|127.0.0.1:7073|127.0.0.1:$((BASE + 5))|" -e "s|forward_auth 127.0.0.1:7072 |forward_auth 127.0.0.1:$((BASE + 7)) |" \
	contrib/caddy/Caddyfile >"$tmp/Caddyfile"
cat >>"$tmp/Caddyfile" <<CADDY

http://127.0.0.1:$((BASE + 3)) {
	root * $tmp/www
	file_server
}
CADDY
HOME=$tmp XDG_DATA_HOME=$tmp XDG_CONFIG_HOME=$tmp caddy run --config "$tmp/Caddyfile" --adapter caddyfile >"$tmp/caddy.log" 2>&1 &
pids+=($!)
caddy_pid=$!

# One HAProxy serves haproxy-shared.cfg as shipped, and beside it HAProxy
# alone, SPOE (haproxy-spoe.cfg's frontend lines and its agent's
# backend), the stick table, a Lua converter answering true, and the
# shared path's counters.
cat >"$tmp/luahook.lua" <<'LUA'
core.register_converters("bench_true", function() return true end)
LUA
sed -e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" -e "s|/usr/local/lib/lua/5.3/|$tmp/haproxy-mod/|" \
	-e "s|/etc/haproxy/dthrottle_shared.lua|$PWD/contrib/haproxy/dthrottle_shared.lua|" \
	-e "/^    lua-load-per-thread /a\\    lua-load-per-thread $tmp/luahook.lua" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 14))|" -e "/^global/a\    localpeer haproxy" \
	contrib/haproxy/haproxy-shared.cfg >"$tmp/haproxy.cfg"
sed -e "s|127.0.0.1:7076|127.0.0.1:$((BASE + 21))|" -e "s|127.0.0.1:7077|127.0.0.1:$((BASE + 22))|" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 20))|" contrib/haproxy/haproxy-peers.cfg >"$tmp/haproxy-peers.cfg"
sed -e "s|/etc/haproxy/spoe-dthrottle.conf|$PWD/contrib/haproxy/spoe-dthrottle.conf|" contrib/haproxy/haproxy-spoe.cfg >"$tmp/haproxy-spoe.cfg"
cat >>"$tmp/haproxy.cfg" <<HAPROXY

frontend spoe
    bind 127.0.0.1:$((BASE + 0))
$(grep -E '^    (filter spoe|http-request send-spoe-group|http-request return status 429)' "$tmp/haproxy-spoe.cfg")
    default_backend app

$(sed -n '/^backend dthrottle-agent/,$p' "$tmp/haproxy-spoe.cfg" | sed -e "s|127.0.0.1:7074|127.0.0.1:$((BASE + 8))|")

frontend luahook
    bind 127.0.0.1:$((BASE + 15))
    http-request deny deny_status 429 unless { src,lua.bench_true -m bool }
    default_backend app

# The shared path's counters.
frontend shared-stats
    bind 127.0.0.1:$((BASE + 16))
    http-request return status 200 content-type text/plain lf-string "%[lua.dthrottle_stats]"

frontend off
    bind 127.0.0.1:$((BASE + 6))
    default_backend app

$(sed -n '/^peers /,/^$/p' "$tmp/haproxy-peers.cfg")
frontend peers
$(sed -n '/^frontend web/,/^$/p' "$tmp/haproxy-peers.cfg" | grep -E '^    (bind|http-request)')
    default_backend app

# The peer's rules on a table of the same type that has no peer: what
# the rules cost HAProxy, apart from pushing the table to dthrottled.
backend peerless
    $(grep -E '^    table web ' "$tmp/haproxy-peers.cfg" | sed 's/^    table web/stick-table/')

frontend peerless
    bind 127.0.0.1:$((BASE + 23))
$(sed -n '/^frontend web/,/^$/p' "$tmp/haproxy-peers.cfg" | grep -E '^    http-request' | sed 's|table dthrottle/web|table peerless|')
    default_backend app

frontend stick
    bind 127.0.0.1:$((BASE + 11))
    stick-table type ip size 100k expire 30s store http_req_rate(10s)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1000000000 }
    default_backend app
HAPROXY
/usr/sbin/haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
haproxy_pid=$!

names=(nginx-off nginx-on nginx-shared nginx-module nginx-limitreq nginx-luahook caddy-off caddy-on haproxy-off haproxy-spoe haproxy-stick haproxy-shared haproxy-luahook haproxy-peers haproxy-peerless)
ports=($((BASE + 1)) $((BASE + 2)) $((BASE + 9)) $((BASE + 17)) $((BASE + 10)) $((BASE + 12)) $((BASE + 3)) $((BASE + 4)) $((BASE + 6)) $((BASE + 0)) $((BASE + 11)) $((BASE + 14)) $((BASE + 15)) $((BASE + 20)) $((BASE + 23)))
bench_await proxies.sh "${ports[@]}"
# Every server must be throttling (or limiting) as it should: a tag
# refused here would make its figures those of a refusal.
for p in "${ports[@]}"; do
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/hello.txt")
	[ "$code" = 200 ] || { echo "proxies.sh: port $p answers $code" >&2; exit 1; }
done
grep -q 'dthrottle: detached' "$tmp/nginx-error.log" && { echo "proxies.sh: nginx-shared did not attach:" >&2; cat "$tmp/nginx-error.log" >&2; exit 1; }
curl -s "http://127.0.0.1:$((BASE + 18))/" | grep -q 'shared=true' || { echo "proxies.sh: nginx-module did not attach:" >&2; cat "$tmp/nginx-error.log" >&2; exit 1; }
for _ in $(seq 50); do
	grep -q 'dthrottle: attached to .*: deciding in process' "$tmp/haproxy.log" && break
	sleep 0.1
done
grep -q 'dthrottle: attached to .*: deciding in process' "$tmp/haproxy.log" || { echo "proxies.sh: haproxy-shared did not attach:" >&2; cat "$tmp/haproxy.log" >&2; exit 1; }
# The process whose CPU each run is charged: the proxy's own (nginx's one
# worker, Caddy's and HAProxy's process), not dthrottled's. The servers of
# one proxy share a process, so its paths are compared on the same one.
nginx_worker=$(pgrep -P "$nginx_master")
cpu_pids=("$nginx_worker" "$nginx_worker" "$nginx_worker" "$nginx_worker" "$nginx_worker" "$nginx_worker"
	"$caddy_pid" "$caddy_pid" "$haproxy_pid" "$haproxy_pid" "$haproxy_pid" "$haproxy_pid" "$haproxy_pid" "$haproxy_pid" "$haproxy_pid")
dthrottled_pid=${pids[0]}
# HAProxy pushes its table to dthrottled once connected: wait for it.
for _ in $(seq 50); do
	grep -q 'haproxy peers: connected' "$tmp/dthrottled.log" && break
	sleep 0.1
done
grep -q 'haproxy peers: connected' "$tmp/dthrottled.log" || { echo "proxies.sh: HAProxy did not connect to dthrottled as its peer:" >&2; cat "$tmp/dthrottled.log" >&2; exit 1; }
# The hits dthrottled charged from HAProxy's table: a request the stick
# table served uncounted would show as a shortfall against wrk's count.
peer_hits() { curl -s "http://127.0.0.1:$((BASE + 19))/metrics" | awk '/^dthrottle_haproxy_hits_total/ {s += $2} END {printf "%d", s}'; }
# The messages dthrottled's SPOE agent answered: a request SPOE served
# unasked (failed open) would show as a shortfall against wrk's count.
spoe_messages() { curl -s "http://127.0.0.1:$((BASE + 19))/metrics" | awk '/^dthrottle_spoe_messages_total/ {s += $2} END {printf "%d", s}'; }
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	# Each round starts one server further on, so that none always runs
	# first (after the others' load) or last.
	for k in "${!names[@]}"; do
		i=$(((k + r - 1) % ${#names[@]}))
		[[ ${names[$i]} =~ $ONLY ]] || continue
		spoe_before=$(spoe_messages)
		hits_before=$(peer_hits)
		d0=$(awk '{print $14 + $15}' "/proc/$dthrottled_pid/stat")
		bench_wrk_cpu "${cpu_pids[$i]}" "${ports[$i]}"
		d1=$(awk '{print $14 + $15}' "/proc/$dthrottled_pid/stat")
		spoe_after=$(spoe_messages)
		dcpu=""
		if [ "${names[$i]}" = haproxy-peers ]; then
			peers_reqs=$((${peers_reqs:-0} + reqs))
			peers_hits=$((${peers_hits:-0} + $(peer_hits) - hits_before))
			dcpu=$(awk -v t=$((d1 - d0)) -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN { printf "  dthrottled CPU %.2f us/request", t * 1e6 / hz / n }')
			echo "${dcpu##* CPU }" | awk '{print $1}' >>"$tmp/peers-cpu"
		fi
		printf 'round %d  %-14s %10.0f req/s  p99 %-8s proxy CPU %s us/request%s%s\n' "$r" "${names[$i]}" "$rps" "$p99" "$cpu" "$dcpu" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $p99 $cpu $r" >>"$tmp/results"
		[ "${names[$i]}" = nginx-shared ] && shared_reqs=$((${shared_reqs:-0} + reqs))
		[ "${names[$i]}" = nginx-module ] && module_reqs=$((${module_reqs:-0} + reqs))
		[ "${names[$i]}" = haproxy-shared ] && haproxy_shared_reqs=$((${haproxy_shared_reqs:-0} + reqs))
		if [ "${names[$i]}" = haproxy-spoe ]; then
			spoe_reqs=$((${spoe_reqs:-0} + reqs))
			spoe_msgs=$((${spoe_msgs:-0} + spoe_after - spoe_before))
		fi
	done
done
[ -n "${peers_reqs:-}" ] && echo "haproxy-peers: $peers_hits hits charged by dthrottled from HAProxy's table (wrk counted $peers_reqs requests); dthrottled CPU per request (median) $(sort -n "$tmp/peers-cpu" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}') us"
# Every request to nginx-shared was decided in its worker, bar the first,
# asked (the tag was new), and those of the readiness checks above.
echo "nginx-shared: $(curl -s "http://127.0.0.1:$((BASE + 13))/") (wrk counted ${shared_reqs:-0} requests)"
# Likewise the native module's, and HAProxy's: ok and no were decided in
# process.
echo "nginx-module: $(curl -s "http://127.0.0.1:$((BASE + 18))/") (wrk counted ${module_reqs:-0} requests)"
echo "haproxy-shared: $(curl -s "http://127.0.0.1:$((BASE + 16))/") (wrk counted ${haproxy_shared_reqs:-0} requests)"
# SPOE asks on every request: the agent answered each one, or it failed open.
echo "haproxy-spoe: ${spoe_msgs:-0} messages answered by dthrottled's agent (wrk counted ${spoe_reqs:-0} requests)"
echo
# on/off compares the medians; "round by round" is the median of each
# round's on/off, the two runs minutes apart at most, which the drift of
# the machine's speed over a whole run moves less.
echo "| proxy | off req/s (median) | on req/s (median) | on/off | on/off round by round (median) | p99 off / on (median) | proxy CPU us/request off / on (median) |"
echo "|---|---|---|---|---|---|---|"
for row in "nginx, auth_request:nginx-off:nginx-on" "nginx, shared table through the FFI (OpenResty):nginx-off:nginx-shared" \
	"nginx, shared table, native module:nginx-off:nginx-module" \
	"nginx, limit_req (its own):nginx-off:nginx-limitreq" "nginx, empty access_by_lua:nginx-off:nginx-luahook" "caddy, forward_auth:caddy-off:caddy-on" \
	"haproxy, SPOE:haproxy-off:haproxy-spoe" \
	"haproxy, stick table (its own):haproxy-off:haproxy-stick" "haproxy, shared table:haproxy-off:haproxy-shared" \
	"haproxy, a Lua converter answering true:haproxy-off:haproxy-luahook" \
	"haproxy, stick table with dthrottled as its peer:haproxy-off:haproxy-peers" \
	"haproxy, stick table with dthrottled against the stick table alone:haproxy-stick:haproxy-peers" \
	"haproxy, the peer's rules on a table with no peer:haproxy-off:haproxy-peerless" \
	"haproxy, stick table with dthrottled against the same rules with no peer:haproxy-peerless:haproxy-peers"; do
	IFS=: read -r p offn onn <<<"$row"
	awk -v p="$p" -v offn="$offn" -v onn="$onn" '
		$1 == offn { off[++n] = $2; poff[n] = $3; coff[n] = $4; offr[$5] = $2 }
		$1 == onn  { on[++m] = $2;  pon[m] = $3; con[m] = $4; onr[$5] = $2 }
		function median(a, k,   i, j, t) {
			for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return a[int((k + 1) / 2)]
		}
		function medianStr(a, k,   i, b) { for (i = 1; i <= k; i++) b[i] = a[i]; return b[int((k + 1) / 2)] }
		END { if (!n || !m) exit
			for (r in onr) if (r in offr) ratio[++k] = onr[r] / offr[r]
			o = median(off, n); x = median(on, m)
			printf "| %s | %.0f | %.0f | %.2fx | %.2fx | %s / %s | %.2f / %.2f |\n", p, o, x, x / o, median(ratio, k), medianStr(poff, n), medianStr(pon, m), median(coff, n), median(con, m) }
	' "$tmp/results"
done
