# bench/lib.sh: what the bench scripts share. Sourced, never run.

# bench_tmp NAME makes $tmp, a directory others may read (servers that
# drop privileges serve from it), and $pids, the background processes to
# stop; on exit they are killed and waited for, and $tmp removed.
bench_tmp() {
	tmp=$(mktemp -d "/tmp/dthrottle-$1.XXXXXX")
	chmod 755 "$tmp"
	pids=()
	trap bench_cleanup EXIT
}

bench_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}

# bench_www makes $tmp/www/hello.txt, the 6-byte file the proxies serve,
# and $tmp/tmp for their temporary files.
bench_www() {
	mkdir -m 755 "$tmp/www" "$tmp/tmp"
	printf 'hello\n' >"$tmp/www/hello.txt"
	chmod 644 "$tmp/www/hello.txt"
}

# bench_nginx_temps prints an nginx http block's temporary-file paths,
# under $tmp/tmp (bench_www makes it), so that nginx run as this user
# writes nothing elsewhere.
bench_nginx_temps() {
	local t
	for t in client_body proxy fastcgi uwsgi scgi; do
		echo "    ${t}_temp_path $tmp/tmp/${t/client_/};"
	done
}

# bench_await SCRIPT PORT...: waits until each port serves /hello.txt with
# a 200, or says which does not and shows the servers' logs.
bench_await() {
	local script=$1 port code
	shift
	for port in "$@"; do
		for _ in $(seq 100); do
			curl -s -o /dev/null "http://127.0.0.1:$port/hello.txt" && break
			sleep 0.1
		done
		code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/hello.txt" || true)
		[ "$code" = 200 ] || { echo "$script: port $port answers $code" >&2; tail "$tmp"/*.log >&2; exit 1; }
	done
}

# bench_steal_start notes the CPU time so far, all of it and what the
# hypervisor gave other guests ("steal", the 8th field of the cpu line of
# /proc/stat), in clock ticks; bench_steal PREFIX then prints, after
# PREFIX, the share of CPU time stolen since.
bench_steal_start() { read -r bench_steal0 bench_total0 < <(bench_cpu_ticks); }
bench_steal() {
	local steal1 total1
	read -r steal1 total1 < <(bench_cpu_ticks)
	awk -v p="$1" -v s="$((steal1 - bench_steal0))" -v t="$((total1 - bench_total0))" 'BEGIN {
		printf "%sCPU time stolen by the hypervisor during the run: %.1f%%\n", p, (t > 0 ? 100 * s / t : 0)
	}'
}
bench_cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t }' /proc/stat; }

# bench_order ROUND NAME... sets order to the NAMEs, reversed in even
# rounds, so that no system always runs first.
bench_order() {
	local round=$1 i
	shift
	order=("$@")
	if [ $((round % 2)) = 0 ]; then
		order=()
		for ((i = $#; i >= 1; i--)); do order+=("${!i}"); done
	fi
}

# bench_wrk PORT runs wrk on the port's /hello.txt and sets rps, p99,
# reqs and errs (non-2xx answers, empty if none) from its report.
bench_wrk() {
	local out
	out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency "http://127.0.0.1:$1/hello.txt")
	rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
	p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	errs=$(awk '/Non-2xx/ {print $5}' <<<"$out")
}

# bench_wrk_cpu PID PORT is bench_wrk PORT, and sets cpu: the CPU time
# (user and system) process PID spent per request meanwhile, in µs.
bench_wrk_cpu() {
	local t0 t1
	t0=$(awk '{print $14 + $15}' "/proc/$1/stat")
	bench_wrk "$2"
	t1=$(awk '{print $14 + $15}' "/proc/$1/stat")
	cpu=$(awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$reqs" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
}

# bench_medians FILE NAME... prints a Markdown table of the runs in FILE,
# lines of "name req/s cpu": per NAME, the median req/s, its ratio to the
# first NAME's, and the median CPU per request.
bench_medians() {
	local file=$1
	shift
	echo "| server | req/s (median) | /$1 | CPU us/request (median) |"
	echo "|---|---|---|---|"
	awk -v names="$*" '
		{ rps[$1, ++n[$1]] = $2; cpu[$1, n[$1]] = $3 }
		function median(name, a,   k, i, j, t, v) {
			k = n[name]
			for (i = 1; i <= k; i++) v[i] = a[name, i]
			for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
			return v[int((k + 1) / 2)]
		}
		END {
			c = split(names, s, " ")
			base = median(s[1], rps)
			for (x = 1; x <= c; x++) {
				m = median(s[x], rps)
				printf "| %s | %.0f | %.2fx | %.2f |\n", s[x], m, m / base, median(s[x], cpu)
			}
		}
	' "$file"
}

# bench_haproxy_module builds libdthrottle in $tmp/libdthrottle and
# HAProxy's Lua C module in $tmp/haproxy-mod, each from a copy of its
# sources, so that the tree stays clean.
bench_haproxy_module() {
	mkdir "$tmp/libdthrottle" "$tmp/haproxy-mod"
	cp libdthrottle/Makefile libdthrottle/*.[ch] "$tmp/libdthrottle/"
	make -s -C "$tmp/libdthrottle" libdthrottle.so >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; exit 1; }
	cp contrib/haproxy/Makefile contrib/haproxy/*.c contrib/haproxy/*.h "$tmp/haproxy-mod/"
	make -s -C "$tmp/haproxy-mod" LIBDT="$tmp/libdthrottle" dthrottle_shared.so >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; exit 1; }
}
