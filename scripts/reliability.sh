#!/usr/bin/env bash
# reliability.sh runs the slow parts of the reliability suite, which the
# default `go test ./...` (and .ci/run) leave out:
#
#   1. the floods at full size (DTHROTTLE_FLOOD=full): 10,000 connections
#      pipelining 1,000,000 requests, and 10,000,000 random tags against
#      max_tags = 1,000,000, with the daemon's resident memory, tracked
#      tags and evictions printed every 500,000 tags;
#   2. every fuzz target for FUZZTIME each (default 60s; a bare number is
#      seconds, "500000x" a count): FuzzParse (./internal/config), FuzzLineReader
#      and FuzzConn (./internal/ways/protocol), FuzzParseQuery
#      (./internal/ways/httpapi), FuzzFrames (./internal/ways/spoe), FuzzDecode
#      (./internal/gossip/wire, ./internal/state, ./internal/ways/hapeers),
#      FuzzConn (./internal/ways/h2unary).
#
# A crasher the fuzzer finds is saved in <package>/testdata/fuzz/<target>/,
# where plain `go test` replays it from then on: fix the defect and commit
# the file with the fix, as its regression seed. The script goes on with
# the other targets and exits non-zero if anything failed.
#
# Go 1.26's fuzzing coordinator can end a clean run with a bare "context
# deadline exceeded" and no crasher (golang/go#75804, fixed in Go 1.27).
# Such a run counts as passed once the target's seeds and corpus replay
# cleanly; anything else is a failure.
#
# Usage: scripts/reliability.sh            (from anywhere in the repository)
#        FUZZTIME=10m scripts/reliability.sh
#        SKIP_FLOOD=1 FUZZTIME=30s scripts/reliability.sh
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

fuzztime=${FUZZTIME:-60s}
case $fuzztime in
*[0-9]) fuzztime=${fuzztime}s ;;
esac
failed=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if [ -z "${SKIP_FLOOD:-}" ]; then
	echo "== floods at full size"
	if ! DTHROTTLE_FLOOD=full go test -count=1 -v -timeout 60m \
		-run '^(TestFloodConns|TestFloodTags)$' ./tests/hostile; then
		failed="$failed floods"
	fi
fi

for target in internal/config:FuzzParse internal/ways/protocol:FuzzLineReader internal/ways/protocol:FuzzConn \
	internal/ways/httpapi:FuzzParseQuery internal/ways/spoe:FuzzFrames internal/gossip/wire:FuzzDecode \
	internal/state:FuzzDecode internal/ways/hapeers:FuzzDecode internal/ways/h2unary:FuzzConn; do
	pkg=${target%%:*} name=${target#*:}
	dir=$pkg/testdata/fuzz/$name
	echo "== fuzzing $name in ./$pkg for $fuzztime"
	before=$(ls "$dir" 2>/dev/null | wc -l)
	# -timeout 0: the fuzzing budget, not go test's 10m default, ends it.
	go test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" \
		-fuzzminimizetime 2s -timeout 0 "./$pkg" 2>&1 | tee "$log"
	status=$?
	after=$(ls "$dir" 2>/dev/null | wc -l)
	if [ "$after" -gt "$before" ]; then
		echo "!! new crasher(s) in $dir: fix the defect, commit them as regression seeds"
		failed="$failed $name"
	elif [ "$status" -ne 0 ]; then
		if grep -q '^    context deadline exceeded$' "$log" && ! grep -q -e 'panic:' -e 'Failing input' "$log" &&
			go test -count=1 -run "^$name\$" "./$pkg"; then
			echo "   (a bare deadline at the end of fuzzing, golang/go#75804: the corpus replays cleanly)"
		else
			failed="$failed $name"
		fi
	fi
done

if [ -n "$failed" ]; then
	echo "FAILED:$failed"
	exit 1
fi
echo "reliability: all passed"
