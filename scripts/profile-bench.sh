#!/usr/bin/env bash
# profile-bench.sh: where the time of the generated CPU kernels goes, under
# `attnc bench`, with perf's software cpu-clock sampling (which works in a
# virtual machine without hardware counters, where `perf stat -e
# instructions` says <not supported>).
#
# Usage: scripts/profile-bench.sh [attnc bench flags...]
#   default flags: --decode f16 --prefill "" --seconds 3
#
# It runs `attnc bench --work-dir DIR/work FLAGS` under
#   perf record -e cpu-clock -F $PERF_FREQ -g
# and prints the split over the generated kernels' functions (the samples
# in the kernel libraries and libm, which has their expf, as shares of
# those samples), then the split over every library (attnc's setup, the
# yardsticks, the kernels).
#
# Environment: ATTNC (a prebuilt attnc; default: go build ./cmd/attnc),
# PROFILE_DIR (where perf.data and the built kernels stay; default: a new
# temporary directory), PERF_FREQ (samples per second, default 1999).
# Without perf, README.md ("Profiling") shows valgrind --tool=callgrind on a
# C driver instead (callgrind cannot run attnc itself, a Go program).
set -euo pipefail

cd "$(dirname "$0")/.."

die() {
	echo "profile-bench: FAIL: $*" >&2
	exit 1
}

command -v perf >/dev/null 2>&1 ||
	die "perf not found (apt-get install linux-perf); README.md, Profiling, shows valgrind --tool=callgrind instead"
dir=${PROFILE_DIR:-$(mktemp -d)}
mkdir -p "$dir"
if ! perf record -e cpu-clock -o "$dir/probe.data" -- true >/dev/null 2>&1; then
	die "perf record -e cpu-clock does not work here (kernel.perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?')); README.md, Profiling, shows valgrind --tool=callgrind instead"
fi
rm -f "$dir/probe.data"

attnc=${ATTNC:-}
if [[ -z $attnc ]]; then
	go build -o "$dir/attnc" ./cmd/attnc || die "go build ./cmd/attnc failed"
	attnc=$dir/attnc
fi

args=("$@")
if ((${#args[@]} == 0)); then
	args=(--decode f16 --prefill "" --seconds 3)
fi

echo "== perf record -e cpu-clock -F ${PERF_FREQ:-1999} -g -- attnc bench --work-dir $dir/work ${args[*]}"
perf record -e cpu-clock -F "${PERF_FREQ:-1999}" -g -o "$dir/perf.data" -- \
	"$attnc" bench --work-dir "$dir/work" "${args[@]}" ||
	die "attnc bench failed under perf record"

libs=$(find "$dir/work" -name '*.so' ! -name 'yardstick-*' -printf '%f\n' | sort | paste -sd, -)
[[ -n $libs ]] || die "no kernel library under $dir/work"
libs+=,libm.so.6 # the kernels' expf, tanhf

echo
echo "== kernel functions: shares of the samples in $libs"
perf report -i "$dir/perf.data" --no-children --dsos "$libs" --percentage relative \
	--sort dso,symbol -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^[[:space:]]*$' | head -40
echo
echo "== every library: shares of all samples"
perf report -i "$dir/perf.data" --no-children --sort dso -g none --stdio 2>/dev/null |
	grep -v '^#' | grep -v '^[[:space:]]*$' | head -20
echo
echo "perf.data and the kernels are in $dir; instructions of a hot function:"
echo "  perf annotate -i $dir/perf.data --stdio SYMBOL"
