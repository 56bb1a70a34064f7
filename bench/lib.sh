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
