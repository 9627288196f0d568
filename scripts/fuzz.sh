#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the module for a fixed time each, one
# after another, and reports per target the executions run, the new
# interesting inputs found and whether it failed (with the failing input Go
# wrote under the package's testdata/fuzz/). It goes on after a failure and
# exits 1 at the end if any target failed. `make fuzz` runs it.
#
# usage: scripts/fuzz.sh TIME REPORT
# GO names the go command (default go); FUZZ_PKGS, a list of package
# directories (./gtt ./vfio), limits the run to those; FUZZMINIMIZETIME
# bounds the minimizing of each new input (default 5s: go's 60s would take
# most of a short run for the targets whose inputs are kilobytes).
#
# Go 1.26's fuzz coordinator can fail a target that found nothing with a
# bare "context deadline exceeded" at the end of -fuzztime
# (go.dev/issue/75804, fixed in Go 1.27); such a run wrote no failing input,
# so it is reported as ok with that note rather than as a failure.
set -u -o pipefail

fuzztime=${1:-30s}
report=${2:-.cache/fuzz-report.txt}
go=${GO:-go}
logs=$(dirname "$report")/fuzz-logs
mkdir -p "$logs"
module=$($go list -m)

# The packages with a fuzz target: those whose tests declare one, confirmed
# by go test -list (which also applies build constraints).
tests='{{$d := .Dir}}{{range .TestGoFiles}}{{$d}}/{{.}} {{end}}{{range .XTestGoFiles}}{{$d}}/{{.}} {{end}}'
dirs=${FUZZ_PKGS:-$($go list -f "$tests" ./... | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u)}

rows=()
failed=0
start=$(date +%s)
for dir in $dirs; do
	pkg=$($go list "$dir") || { rows+=("$dir - - - FAIL(go list)"); failed=1; continue; }
	targets=$($go test -list '^Fuzz' "$pkg" | grep '^Fuzz') || { rows+=("${pkg#"$module"/} - - - FAIL(build)"); failed=1; continue; }
	for f in $targets; do
		log=$logs/$(echo "${pkg#"$module"/}" | tr / _)_$f.log
		echo "== ${pkg#"$module"/} $f ($fuzztime)"
		$go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime "${FUZZMINIMIZETIME:-5s}" "$pkg" >"$log" 2>&1
		rc=$?
		# fuzz: elapsed: 30s, execs: 123456 (4115/sec), new interesting: 3 (total: 22)
		last=$(grep -E '^fuzz: elapsed: .*execs: [0-9]+' "$log" | tail -1)
		execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
		newi=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
		result=ok
		input=$(sed -nE 's/.*Failing input written to (.*)/\1/p' "$log" | tail -1)
		if [ $rc -ne 0 ] && [ -z "$input" ] && [ -n "$execs" ] &&
			[ "$(grep -cvE '^(fuzz: elapsed: |--- FAIL: |    context deadline exceeded$|FAIL|exit status 1$)' "$log")" = 0 ]; then
			result="ok (deadline race, go.dev/issue/75804)"
		elif [ $rc -ne 0 ]; then
			failed=1
			result="FAIL${input:+ (${pkg#"$module"/}/$input)}"
			tail -n 30 "$log"
		fi
		rows+=("${pkg#"$module"/} $f ${execs:-0} ${newi:-0} $result")
		echo "   execs ${execs:-0}, new interesting ${newi:-0}: $result"
	done
done

{
	echo "make fuzz: $(date -u +%Y-%m-%dT%H:%MZ), $($go env GOVERSION), FUZZTIME $fuzztime per target, $(nproc) CPUs, $(($(date +%s) - start))s in all"
	printf '%-18s %-20s %12s %5s  %s\n' package target execs new result
	for r in "${rows[@]}"; do
		read -r p f e n res <<<"$r"
		printf '%-18s %-20s %12s %5s  %s\n' "$p" "$f" "$e" "$n" "$res"
	done
	echo "(new: inputs that reached new coverage this run, kept in GOCACHE's fuzz cache; logs in $logs)"
} >"$report"
echo
cat "$report"
echo "report written to $report"
exit $failed
