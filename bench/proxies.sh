#!/usr/bin/env bash
# bench/proxies.sh: what throttling costs nginx, Caddy and HAProxy serving a
# small static response to wrk with 64 concurrent keep-alive connections,
# side by side in one run. For each proxy two servers run at once on their
# own loopback ports: "off", the proxy alone, and "on", the ready-to-copy
# configuration of contrib/ (nginx auth_request and Caddy forward_auth to
# the HTTP decision endpoint; nginx's Lua module and HAProxy's Lua action
# over the Unix socket),
# every request spending a token of a tag that is never exhausted (burst
# 1,000,000, rate 1e9). Runs are interleaved (nginx off, nginx on, caddy
# off, ...) so the machine's load falls on all alike. Printed: requests/s
# and the 99th percentile latency of each run, then the median requests/s
# of each and the ratio on/off. Apache: bench/apache.sh.
#
#   bench/proxies.sh                 # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s bench/proxies.sh
#
# Needs nginx, caddy, haproxy and wrk (Debian: apt-get install -y nginx
# caddy haproxy wrk).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28080} # ports BASE to BASE+8 on 127.0.0.1, below the ephemeral range

for tool in /usr/sbin/nginx caddy /usr/sbin/haproxy wrk; do
	command -v "$tool" >/dev/null || { echo "proxies.sh: $tool not found (apt-get install -y nginx libnginx-mod-http-lua caddy haproxy wrk)" >&2; exit 1; }
done

. bench/lib.sh
bench_tmp proxies

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
listen = "127.0.0.1:$((BASE + 7))"
refuse_status = 429
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
pids+=($!)

# Ports: nginx BASE+1 (off) BASE+2 (on, auth_request) BASE+8 (on, Lua),
# caddy BASE+3 BASE+4 (fail-open BASE+5), haproxy BASE+6 BASE+0;
# dthrottled's HTTP endpoint BASE+7.
sed -e "s|listen 8080;|listen 127.0.0.1:$((BASE + 2));|" -e "s|root /var/www/html;|root $tmp/www;|" \
	-e "s|server 127.0.0.1:7072;|server 127.0.0.1:$((BASE + 7));|" contrib/nginx/dthrottle.conf >"$tmp/nginx-on.conf"
sed -e "s|/etc/nginx/dthrottle/|$PWD/contrib/nginx/|" -e "s|unix:/run/dthrottle/dthrottle.sock|unix:$tmp/d.sock|" \
	-e "s|rate = 1,|rate = 1e9,|" -e "s|burst = 20,|burst = 1000000,|" contrib/nginx/dthrottle-lua.conf >"$tmp/nginx-lua.conf"
cat >"$tmp/nginx.conf" <<NGINX
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log $tmp/nginx-error.log;
pid $tmp/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/tmp/body;
    proxy_temp_path $tmp/tmp/proxy;
    fastcgi_temp_path $tmp/tmp/fastcgi;
    uwsgi_temp_path $tmp/tmp/uwsgi;
    scgi_temp_path $tmp/tmp/scgi;
    server { listen 127.0.0.1:$((BASE + 1)); root $tmp/www; location / { try_files \$uri =404; } }
    include $tmp/nginx-on.conf;
    include $tmp/nginx-lua.conf;
    server {
        listen 127.0.0.1:$((BASE + 8));
        root $tmp/www;
        location / {
            access_by_lua_block { require("dthrottle").access(ngx.var.remote_addr) }
            try_files \$uri =404;
        }
    }
}
NGINX
/usr/sbin/nginx -p "$tmp" -c "$tmp/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.log" &
pids+=($!)

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

sed -e "s|/run/dthrottle/dthrottle.sock|$tmp/d.sock|" -e "s|lua-load /etc/haproxy/dthrottle.lua|lua-load $tmp/dthrottle.lua|" \
	-e "s|bind :8080|bind 127.0.0.1:$((BASE + 0))|" contrib/haproxy/haproxy.cfg >"$tmp/haproxy.cfg"
cp contrib/haproxy/dthrottle.lua "$tmp/dthrottle.lua"
cat >>"$tmp/haproxy.cfg" <<HAPROXY

frontend off
    bind 127.0.0.1:$((BASE + 6))
    default_backend app
HAPROXY
/usr/sbin/haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)

bench_await proxies.sh $((BASE + 1)) $((BASE + 2)) $((BASE + 8)) $((BASE + 3)) $((BASE + 4)) $((BASE + 6)) $((BASE + 0))

names=(nginx-off nginx-on nginx-lua caddy-off caddy-on haproxy-off haproxy-on)
ports=($((BASE + 1)) $((BASE + 2)) $((BASE + 8)) $((BASE + 3)) $((BASE + 4)) $((BASE + 6)) $((BASE + 0)))
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	for i in "${!names[@]}"; do
		bench_wrk "${ports[$i]}"
		printf 'round %d  %-12s %10.0f req/s  p99 %s%s\n' "$r" "${names[$i]}" "$rps" "$p99" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $p99" >>"$tmp/results"
	done
done
echo
echo "| proxy | off req/s (median) | on req/s (median) | on/off | p99 off / on (median) |"
echo "|---|---|---|---|---|"
for row in "nginx, auth_request:nginx-off:nginx-on" "nginx, Lua:nginx-off:nginx-lua" "caddy:caddy-off:caddy-on" "haproxy:haproxy-off:haproxy-on"; do
	IFS=: read -r p offn onn <<<"$row"
	awk -v p="$p" -v offn="$offn" -v onn="$onn" '
		$1 == offn { off[++n] = $2; poff[n] = $3 }
		$1 == onn  { on[++m] = $2;  pon[m] = $3 }
		function median(a, k,   i, j, t) {
			for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return a[int((k + 1) / 2)]
		}
		function medianStr(a, k,   i, b) { for (i = 1; i <= k; i++) b[i] = a[i]; return b[int((k + 1) / 2)] }
		END { o = median(off, n); x = median(on, m)
			printf "| %s | %.0f | %.0f | %.2fx | %s / %s |\n", p, o, x, x / o, medianStr(poff, n), medianStr(pon, m) }
	' "$tmp/results"
done
