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
