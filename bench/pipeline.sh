#!/usr/bin/env bash
# bench/pipeline.sh: what throttling costs nginx and HAProxy on each of
# their documented paths, side by side in one run: a small static response
# to wrk with 64 concurrent keep-alive connections, through
#   nginx-off        nginx alone
#   nginx-auth       contrib/nginx/dthrottle.conf: auth_request to the HTTP endpoint
#   nginx-lua        contrib/nginx/dthrottle-lua.conf: Lua, a pool of kept-alive
#                    connections per worker, one request on each at a time
#   nginx-pipeline   contrib/nginx/dthrottle-pipeline.conf: Lua, one pipelined
#                    connection per worker to the line protocol
#   haproxy-off      HAProxy alone
#   haproxy-conn     contrib/haproxy/haproxy.cfg: Lua, a connection per request
#   haproxy-pool     contrib/haproxy/haproxy-pool.cfg: Lua, connections kept per thread
#   haproxy-spoe     contrib/haproxy/haproxy-spoe.cfg: SPOE, dthrottled's agent
#                    over pipelined connections
# every request spending a token of a tag that is never exhausted (burst
# 1,000,000, rate 1e9). The runs are interleaved, round by round, so the
# machine's load falls on all alike. Printed per run: requests/s, p99, and
# how many requests dthrottled was asked (its dthrottle_queries_total before
# and after) against how many wrk completed, so that a request served
# unasked (failed open) would show; then medians and ratios against the
# proxy alone. Caddy's forward_auth and Apache: bench/proxies.sh,
# bench/apache.sh.
#
#   bench/pipeline.sh                   # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s bench/pipeline.sh
#   PATHS='haproxy-*' bench/pipeline.sh # only the paths matching the pattern
#
# Needs nginx, libnginx-mod-http-lua, haproxy, wrk and curl.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28180} # ports BASE+1 to BASE+11 on 127.0.0.1, below the ephemeral range
PATHS=${PATHS:-*}   # a shell pattern: the paths to run

for tool in /usr/sbin/nginx /usr/sbin/haproxy wrk curl; do
	command -v "$tool" >/dev/null || { echo "pipeline.sh: $tool not found (apt-get install -y nginx libnginx-mod-http-lua haproxy wrk curl)" >&2; exit 1; }
done
[ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || { echo "pipeline.sh: apt-get install -y libnginx-mod-http-lua" >&2; exit 1; }

. bench/lib.sh
bench_tmp pipeline

bench_www

go build -o "$tmp/dthrottled" ./cmd/dthrottled
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0666"
[limit]
rate = 1e9
burst = 1000000
[http]
listen = "127.0.0.1:$((BASE + 8))"
[admin]
http = "127.0.0.1:$((BASE + 9))"
[spoe]
listen = "127.0.0.1:$((BASE + 11))"
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
pids+=($!)

# nginx: BASE+1 off, BASE+2 auth_request, BASE+3 Lua pipeline; one worker
# each (the proxies share two cores with dthrottled and wrk).
sed -e "s|listen 8080;|listen 127.0.0.1:$((BASE + 2));|" -e "s|root /var/www/html;|root $tmp/www;|" \
	-e "s|server 127.0.0.1:7072;|server 127.0.0.1:$((BASE + 8));|" contrib/nginx/dthrottle.conf >"$tmp/nginx-auth.conf"
sed -e "s|listen 8080;|listen 127.0.0.1:$((BASE + 3));|" -e "s|root /var/www/html;|root $tmp/www;|" \
	-e "s|/etc/nginx/dthrottle/|$PWD/contrib/nginx/|" -e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" \
	contrib/nginx/dthrottle-pipeline.conf >"$tmp/nginx-pipeline.conf"
cat >"$tmp/nginx.conf" <<NGINX
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log $tmp/nginx-error.log;
pid $tmp/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
$(bench_nginx_temps)
    server { listen 127.0.0.1:$((BASE + 1)); root $tmp/www; location / { try_files \$uri =404; } }
    include $tmp/nginx-auth.conf;
    include $tmp/nginx-pipeline.conf;
}
NGINX
/usr/sbin/nginx -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.log" &
pids+=($!)
# nginx-lua on BASE+7: its own nginx, as both Lua files set lua_package_path.
mkdir -m 755 "$tmp/lua"
sed -e "s|/etc/nginx/dthrottle/|$PWD/contrib/nginx/|" -e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" \
	contrib/nginx/dthrottle-lua.conf >"$tmp/lua/dthrottle-lua.conf"
sed -e "s|pid $tmp/nginx.pid;|pid $tmp/lua/nginx.pid;|" -e "s|error_log $tmp/nginx-error.log;|error_log $tmp/lua/error.log;|" \
	-e "/include /d" -e "s|listen 127.0.0.1:$((BASE + 1)); root $tmp/www; location / {|listen 127.0.0.1:$((BASE + 7)); root $tmp/www; location / { access_by_lua_block { require(\"dthrottle\").access(ngx.var.remote_addr) }|" \
	-e "s|^}$|    include $tmp/lua/dthrottle-lua.conf;\n}|" "$tmp/nginx.conf" >"$tmp/lua/nginx.conf"
/usr/sbin/nginx -p "$tmp/lua" -c "$tmp/lua/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx-lua.log" &
pids+=($!)

# HAProxy: BASE+4 off, BASE+5 a connection per request, BASE+6 kept
# connections; two processes, each with its own two threads, as shipped.
sed -e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" -e "s|lua-load /etc/haproxy/dthrottle.lua|lua-load $PWD/contrib/haproxy/dthrottle.lua|" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 5))|" contrib/haproxy/haproxy.cfg >"$tmp/haproxy-conn.cfg"
cat >>"$tmp/haproxy-conn.cfg" <<HAPROXY

frontend off
    bind 127.0.0.1:$((BASE + 4))
    default_backend app
HAPROXY
sed -e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" -e "s|/etc/haproxy/dthrottle_pool.lua|$PWD/contrib/haproxy/dthrottle_pool.lua|" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 6))|" contrib/haproxy/haproxy-pool.cfg >"$tmp/haproxy-pool.cfg"
/usr/sbin/haproxy -db -f "$tmp/haproxy-conn.cfg" >"$tmp/haproxy-conn.log" 2>&1 &
pids+=($!)
/usr/sbin/haproxy -db -f "$tmp/haproxy-pool.cfg" >"$tmp/haproxy-pool.log" 2>&1 &
pids+=($!)
# SPOE on BASE+10: its own process and two threads, as shipped.
sed -e "s|/etc/haproxy/spoe-dthrottle.conf|$PWD/contrib/haproxy/spoe-dthrottle.conf|" -e "s|127.0.0.1:7074|127.0.0.1:$((BASE + 11))|" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 10))|" contrib/haproxy/haproxy-spoe.cfg >"$tmp/haproxy-spoe.cfg"
/usr/sbin/haproxy -db -f "$tmp/haproxy-spoe.cfg" >"$tmp/haproxy-spoe.log" 2>&1 &
pids+=($!)

all_names=(nginx-off nginx-auth nginx-lua nginx-pipeline haproxy-off haproxy-conn haproxy-pool haproxy-spoe)
all_ports=($((BASE + 1)) $((BASE + 2)) $((BASE + 7)) $((BASE + 3)) $((BASE + 4)) $((BASE + 5)) $((BASE + 6)) $((BASE + 10)))
names=() ports=()
for i in "${!all_names[@]}"; do
	# shellcheck disable=SC2053 # PATHS is a pattern
	[[ ${all_names[$i]} == $PATHS ]] && names+=("${all_names[$i]}") && ports+=("${all_ports[$i]}")
done
[ ${#names[@]} -gt 0 ] || { echo "pipeline.sh: no path matches PATHS=$PATHS" >&2; exit 1; }
bench_await pipeline.sh "${ports[@]}"

# The table's decisions: the line protocol's queries and the SPOE agent's alike.
asked() { curl -s "http://127.0.0.1:$((BASE + 9))/metrics" | awk '/^dthrottle_queries_total/ {s += $2} END {print s + 0}'; }

echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	for i in "${!names[@]}"; do
		before=$(asked)
		bench_wrk "${ports[$i]}"
		after=$(asked)
		printf 'round %d  %-15s %8.0f req/s  p99 %-9s requests %-8s asked %s%s\n' "$r" "${names[$i]}" "$rps" "$p99" "$reqs" "$((after - before))" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $p99" >>"$tmp/results"
	done
done
echo
echo "| path | req/s (median) | against the proxy alone | p99 (median) |"
echo "|---|---|---|---|"
awk '
	function median(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return a[int((k + 1) / 2)]
	}
	function ms(s) { if (s ~ /us$/) return s / 1000; if (s ~ /ms$/) return s + 0; return s * 1000 }
	{ n[$1]++; rps[$1, n[$1]] = $2; p[$1, n[$1]] = ms($3); if (!($1 in seen)) { seen[$1] = 1; order[++m] = $1 } }
	END {
		for (k = 1; k <= m; k++) {
			name = order[k]
			for (i = 1; i <= n[name]; i++) { a[i] = rps[name, i]; b[i] = p[name, i] }
			med[name] = median(a, n[name]); pm = median(b, n[name])
			split(name, parts, "-"); base = parts[1] "-off"
			printf "| %s | %.0f | %.2fx | %.2f ms |\n", name, med[name], med[name] / med[base], pm
		}
	}
' "$tmp/results"
