#!/usr/bin/env bash
# amx-check.sh: issue 25's checks on a CPU with AMX that has neither LLVM 14
# nor Go (the Xeon of a lent GPU machine), from a bundle prepared here.
#
#   scripts/amx-check.sh prepare [DIR]   here: Go 1.26, LLVM 14, gcc
#   scripts/amx-check.sh run [DIR]       there: gcc and a CPU with AMX
#
# DIR defaults to .amx-check (git-ignored; a device run names it in carry).
#
# prepare builds attnc and the test binaries of conformance and targets/cpu
# (go test -c), then runs every command `run` runs, here, with
# ATTNC_RECORD_OBJECTS=DIR/objects, so that every object those commands
# compile is recorded (cpurt/replay.go: generated IR is deterministic, and
# the commands build the same IR on any x86-64 machine — every level's
# clones, never "host" — so the AMX machine asks for the same objects). It
# packs the binaries and objects into DIR/bundle.tar.gz (a few tens of MiB:
# a device run carries at most 64 MiB) and leaves nothing else in DIR.
# The commands also pass here, at the levels this CPU has: a failure stops
# prepare. It also compiles scripts/amxstub.sh's stubbed x86-64-amx prefill
# object (AMXSTUB_BUILD_ONLY) for step 3; with AMX_CHECK_BASE=REV (a git
# revision that has the x86-64-amx level) it builds REV's attnc too, so that
# step 3 times REV's tiles against this tree's.
#
# run unpacks the bundle into a temporary directory and runs, with
# ATTNC_REPLAY_OBJECTS (opt and llc never run; gcc links) and CI=true (a
# missing tool fails, never skips), within AMX_CHECK_BUDGET seconds
# (default 480):
#
#   1. targets/cpu's TestAMXBlockInProcess: the process asks Linux for the
#      tile state, as detection does, and the tile routine runs in hardware
#      (TestCPULevelAMX, the detection test, compiles through lltest, which
#      runs opt itself: the bench's "kernels at x86-64-amx" shows detection
#      instead);
#   2. conformance's TestKernelMatrix over the bf16 variants at every level
#      (-levels.all -matrix.dtypes bf16: x86-64-amx clones only bf16
#      kernels), TestBF16DenormalOperands (TDPBF16PS reads denormals as
#      zero: the rule must still hold) and TestAMXRepeatedPage (one page
#      named hundreds of times: the tiles' sums must not drift);
#   3. tiles (on a CPU with AMX; elsewhere reported as not run, and passed):
#      the bench's bf16 prefill (2048 causal, 32/8, d128) at x86-64-amx, 1
#      thread, scripts/prefillcpu.c: with its tiles (A) against the same
#      build with rt.amx_mm32 stubbed out (B, scripts/amxstub.c: zeros, a
#      TDPBF16PS count), so A − B is the tiles' time on this CPU and B the
#      rest; with a base build in the bundle, REV's x86-64-amx prefill (A)
#      against this tree's (B). prepare records the builds' objects; run
#      links the libraries and prefillcpu with the AMX machine's gcc;
#   4. attnc bench, 2 threads, prefill bf16, f16 and f32 at the detected
#      level (x86-64-amx for bf16), then bf16 forced to x86-64-v4, the
#      level such a CPU ran before: issue 25's table (prefill against the
#      fp32 FMA peak; bf16 >= 2x and f16 >= 1.5x with AMX) and decode
#      against its paged scan.
#
# It prints each step's tail and a summary; with $OUT set (a device run),
# the logs go there too. Exit status 0 only if every step passed.
set -euo pipefail

die() {
	echo "amx-check: FAIL: $*" >&2
	exit 1
}

mode=${1:-}
here=${BASH_SOURCE[0]%/*}
[[ $here == "${BASH_SOURCE[0]}" ]] && here=.
cd "$here/.." || die "cannot cd to the repository root"
[[ -f go.mod && -d conformance ]] || die "$(pwd) is not the attnc repository root"
root=$(pwd)
dir=${2:-.amx-check}
case $dir in /*) ;; *) dir=$root/$dir ;; esac

# The commands of both modes. $1: the directory holding attnc and the test
# binaries. Each runs in its package's folder (testdata), as go test does.
levels=x86-64,x86-64-v3,x86-64-v4,x86-64-v4-bf16,x86-64-amx
step_cpu() { (cd "$root/targets/cpu" && "$1/cpu.test" -test.run '^TestAMXBlockInProcess$' -test.v -test.timeout 10m); }
step_matrix() {
	(cd "$root/conformance" && "$1/conformance.test" -test.run '^(TestKernelMatrix|TestBF16DenormalOperands|TestAMXRepeatedPage)$' \
		-levels.all -matrix.dtypes bf16 -test.v -test.timeout 20m)
}
# step_tiles times the x86-64-amx prefill with and without its tiles (and
# against a base build, when the bundle has one). Its builds run wherever it
# runs, so that prepare records their objects; the timing needs AMX.
step_tiles() {
	local b=$1 t
	[[ -f $b/p_stub.o && -f $b/p.attn ]] || {
		echo "tiles: not in this bundle (no p_stub.o): not run"
		return 0
	}
	t=${b%/*}/tiles # beside bin: removed with the run's work folder, or by prepare
	rm -rf "$t" && mkdir -p "$t" || return 1
	"$b/attnc" build "$b/p.attn" -o "$t/amx" --cpu-levels x86-64-amx --shared >/dev/null || return 1
	if [[ -x $b/base-attnc ]]; then
		"$b/base-attnc" build "$b/p.attn" -o "$t/base" --cpu-levels x86-64-amx --shared >/dev/null || return 1
	fi
	gcc -O3 -march=x86-64-v4 -shared -fPIC -o "$t/stub.so" "$b/p_stub.o" "$root/scripts/amxstub.c" -lm -lpthread || return 1
	gcc -O2 -o "$t/prefillcpu" "$root/scripts/prefillcpu.c" -ldl || return 1
	if [[ $amx != yes ]]; then
		echo "tiles: this CPU has no AMX: not run (the builds passed)"
		return 0
	fi
	echo "tiles: x86-64-amx bf16 prefill, 1 thread: A with its tiles, B with them stubbed (A - B: the tiles)"
	ATTNC_CPU_LEVEL=x86-64-amx "$t/prefillcpu" p bf16 2048 3 "$t/amx/p.so" "$t/stub.so" || return 1
	echo "tiles: the amxstub line counts B's 7 calls (a first call, then 2 in each of 3 rounds)"
	if [[ -f $t/base/p.so ]]; then
		echo "tiles: A the base ($(cat "$b/base.rev")), B this tree, both at x86-64-amx, 1 thread"
		ATTNC_CPU_LEVEL=x86-64-amx "$t/prefillcpu" p bf16 2048 3 "$t/base/p.so" "$t/amx/p.so" || return 1
	fi
}
step_bench() {
	"$1/attnc" bench --threads 2 --cpu-levels "$levels" --decode f32,f16,bf16,f16/i8 --prefill bf16,f16,f32 --seconds 1 &&
		ATTNC_CPU_LEVEL=x86-64-v4 "$1/attnc" bench --threads 2 --cpu-levels "$levels" --decode "" --prefill bf16 --seconds 1
}

case $mode in
prepare)
	for t in go gcc; do command -v "$t" >/dev/null 2>&1 || die "$t not found (prepare runs where Go and LLVM 14 are)"; done
	export PATH=/usr/lib/llvm-14/bin:$PATH
	command -v opt >/dev/null 2>&1 && command -v llc >/dev/null 2>&1 || die "LLVM 14's opt and llc not found (apt-get install llvm-14)"
	rm -rf "$dir"
	mkdir -p "$dir/bin"
	echo "amx-check: building attnc and the test binaries" >&2
	go build -o "$dir/bin/attnc" ./cmd/attnc
	go test -c -o "$dir/bin/conformance.test" ./conformance
	go test -c -o "$dir/bin/cpu.test" ./targets/cpu
	AMXSTUB_BUILD_ONLY=1 AMXSTUB_DIR=$dir/stub ATTNC=$dir/bin/attnc scripts/amxstub.sh 2048 1 bf16 ||
		die "scripts/amxstub.sh could not build the stubbed prefill"
	cp "$dir/stub/b/p_stub.o" "$dir/stub/p.attn" "$dir/bin/"
	rm -rf "$dir/stub"
	if [[ -n ${AMX_CHECK_BASE:-} ]]; then
		rev=$(git rev-parse --verify "$AMX_CHECK_BASE^{commit}") || die "AMX_CHECK_BASE=$AMX_CHECK_BASE names no commit"
		wt=$(mktemp -d)
		git worktree add --detach "$wt" "$rev" >/dev/null 2>&1 || die "git worktree add $rev failed"
		(cd "$wt" && go build -o "$dir/bin/base-attnc" ./cmd/attnc) || { git worktree remove --force "$wt"; die "go build of $rev's attnc failed"; }
		git worktree remove --force "$wt"
		git log -1 --format='%h %s' "$rev" >"$dir/bin/base.rev"
	fi
	export ATTNC_RECORD_OBJECTS=$dir/objects ATTNC_REPLAY_OBJECTS= CI=true
	amx=no
	for s in cpu matrix tiles bench; do
		echo "amx-check: recording step $s (it runs here too)" >&2
		"step_$s" "$dir/bin" >"$dir/$s.log" 2>&1 || { tail -30 "$dir/$s.log" >&2; die "step $s failed here ($dir/$s.log)"; }
	done
	tar -C "$dir" -czf "$dir/bundle.tar.gz" bin objects
	rm -rf "$dir/bin" "$dir/objects" "$dir/tiles" "$dir"/*.log
	echo "amx-check: $dir/bundle.tar.gz: $(du -h "$dir/bundle.tar.gz" | cut -f1), $(tar -tzf "$dir/bundle.tar.gz" | grep -c '\.o$') objects" >&2
	;;
run)
	[[ -f $dir/bundle.tar.gz ]] || die "no $dir/bundle.tar.gz: run 'scripts/amx-check.sh prepare' where Go and LLVM 14 are, and carry $dir"
	command -v gcc >/dev/null 2>&1 || die "gcc not found: replayed objects are linked with gcc -shared"
	flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
	model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- || true)
	amx=no
	[[ " $flags " == *" amx_tile "* && " $flags " == *" amx_bf16 "* ]] && amx=yes
	echo "amx-check: CPU:$model; AMX-TILE and AMX-BF16: $amx; $(nproc) CPUs"
	[[ $amx == yes ]] || echo "amx-check: this CPU has no AMX: the x86-64-amx level is reported as not run" >&2
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	tar -C "$work" -xzf "$dir/bundle.tar.gz"
	export ATTNC_REPLAY_OBJECTS=$work/objects ATTNC_RECORD_OBJECTS= CI=true
	budget=${AMX_CHECK_BUDGET:-480}
	start=$SECONDS
	logs=${OUT:-$work}
	status=()
	for s in cpu matrix tiles bench; do
		left=$((budget - (SECONDS - start)))
		if ((left < 20)); then
			status+=("$s: not run (budget spent)")
			continue
		fi
		t0=$SECONDS
		if timeout "$left" bash -c "$(declare -f "step_$s"); root='$root' levels='$levels' amx='$amx' step_$s '$work/bin'" >"$logs/$s.log" 2>&1; then
			status+=("$s: pass ($((SECONDS - t0)) s)")
		else
			status+=("$s: FAIL ($((SECONDS - t0)) s)")
		fi
		echo "== $s: last lines"
		tail -25 "$logs/$s.log"
	done
	echo "== summary"
	printf '%s\n' "${status[@]}"
	# What ran where: the tile routine (hardware or not), the levels the
	# matrix did not run, the bench's prefill rows (the level they ran at).
	grep -h 'TDPBF16PS' "$logs/cpu.log" 2>/dev/null | sed 's/^ */tiles: /' || true
	grep -h 'not run: this CPU lacks it' "$logs/matrix.log" 2>/dev/null | sed 's/.*level \([^ ]*\) not run.*/\1/' | sort | uniq -c | awk '{print "matrix: " $1 " variants not run at " $2 " (this CPU lacks it)"}' || true
	grep -h '^tiles:\|^lib[AB] best\|^B/A\|^amxstub:' "$logs/tiles.log" 2>/dev/null || true
	grep -h '^prefill\|^decode' "$logs/bench.log" 2>/dev/null || true
	[[ " ${status[*]} " != *FAIL* && " ${status[*]} " != *"not run"* ]]
	;;
*)
	die "usage: scripts/amx-check.sh prepare|run [DIR]"
	;;
esac
