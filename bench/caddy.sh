#!/usr/bin/env bash
# bench/caddy.sh: what asking an outside decision costs Caddy, and what the
# cheapest possible answer would cost it. Four sites of one Caddy serve a
# 6-byte static file to wrk (64 keep-alive connections), side by side,
# interleaved rounds:
#
#   off         the file alone
#   tcp         forward_auth to dthrottled's HTTP decision endpoint on TCP
#               (contrib/caddy/Caddyfile), a tag never exhausted
#   unix        the same over a Unix socket (http.listen = "unix:/path")
#   floor       forward_auth to a site of the same Caddy that answers 204 at
#               once: no decision at all, only the subrequest
#
# "floor" is the most any outside decision can keep on Caddy's build in
# Debian (2.6), whose only way to ask one is forward_auth: no scripting,
# no rate-limit module (caddy list-modules).
#
#   bench/caddy.sh                   # 3 rounds of 5 s each
#   ROUNDS=5 DURATION=10s bench/caddy.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
BASE=${BASE:-28380} # ports BASE to BASE+5 on 127.0.0.1, below the ephemeral range

for tool in caddy wrk curl; do
	command -v "$tool" >/dev/null || { echo "caddy.sh: $tool not found (apt-get install -y caddy wrk curl)" >&2; exit 1; }
done
. bench/lib.sh
bench_tmp caddy
bench_www

go build -o "$tmp/dthrottled" ./cmd/dthrottled
cat >"$tmp/tcp.toml" <<TOML
[listen]
unix = "$tmp/d1.sock"
[limit]
rate = 1e9
burst = 1000000
[http]
listen = "127.0.0.1:$((BASE + 5))"
refuse_status = 429
TOML
sed -e "s|d1.sock|d2.sock|" -e "s|listen = \"127.0.0.1:$((BASE + 5))\"|listen = \"unix:$tmp/http.sock\"|" "$tmp/tcp.toml" >"$tmp/unix.toml"
"$tmp/dthrottled" -config "$tmp/tcp.toml" 2>"$tmp/tcp.log" &
pids+=($!)
"$tmp/dthrottled" -config "$tmp/unix.toml" 2>"$tmp/unix.log" &
pids+=($!)

# One site per path, each the shipped forward_auth block with its
# upstream swapped.
site() { # port upstream
	sed -n '/^:8080 {/,/^}/p' contrib/caddy/Caddyfile |
		sed -e "s|^:8080 {|http://127.0.0.1:$1 {|" -e "s|root \* /var/www/html|root * $tmp/www|" \
			-e "s|forward_auth 127.0.0.1:7072 127.0.0.1:7073 {|forward_auth $2 {|"
}
{
	printf '{\n\tadmin off\n}\n\n'
	printf 'http://127.0.0.1:%d {\n\troot * %s\n\tfile_server\n}\n\n' $((BASE + 0)) "$tmp/www"
	site $((BASE + 1)) "127.0.0.1:$((BASE + 5))"
	site $((BASE + 2)) "unix/$tmp/http.sock"
	site $((BASE + 3)) "127.0.0.1:$((BASE + 4))"
	printf '\nhttp://127.0.0.1:%d {\n\trespond 204\n}\n' $((BASE + 4))
} >"$tmp/Caddyfile"
HOME=$tmp XDG_DATA_HOME=$tmp XDG_CONFIG_HOME=$tmp caddy run --config "$tmp/Caddyfile" --adapter caddyfile >"$tmp/caddy.log" 2>&1 &
pids+=($!)

names=(off tcp unix floor)
ports=($((BASE + 0)) $((BASE + 1)) $((BASE + 2)) $((BASE + 3)))
bench_await caddy.sh "${ports[@]}"

echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); caddy $(caddy version | cut -d' ' -f1); wrk -t2 -c$CONNS -d$DURATION --latency"
for r in $(seq "$ROUNDS"); do
	for i in "${!names[@]}"; do
		bench_wrk "${ports[$i]}"
		printf 'round %d  %-6s %10.0f req/s  p99 %s%s\n' "$r" "${names[$i]}" "$rps" "$p99" "${errs:+  non-2xx $errs}"
		echo "${names[$i]} $rps $p99" >>"$tmp/results"
	done
done
echo
echo "| path | req/s (median) | against Caddy alone | p99 (median) |"
echo "|---|---|---|---|"
awk '
	{ rps[$1, ++n[$1]] = $2; p99[$1, n[$1]] = $3 }
	function med(name,   k, i, j, t, a, b) {
		k = n[name]
		for (i = 1; i <= k; i++) { a[i] = rps[name, i]; b[i] = p99[name, i] }
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (b[j] + 0 < b[i] + 0) { t = b[i]; b[i] = b[j]; b[j] = t }
		mp = b[int((k + 1) / 2)]
		return a[int((k + 1) / 2)]
	}
	END {
		off = med("off")
		split("off tcp unix floor", order, " ")
		for (i = 1; i <= 4; i++) { x = med(order[i]); printf "| %s | %.0f | %.2fx | %s |\n", order[i], x, x / off, mp }
	}
' "$tmp/results"
