#!/usr/bin/env bash
# gpu-check.sh: attnc's check on a machine with nvcc and an NVIDIA GPU.
#
# From the repository root (any working directory works):
#
#   1. builds attnc (go build; no network: GOPROXY=off unless set);
#   2. asks `attnc check` which examples/*.attn generate kernels (those
#      reporting "not supported yet" are skipped) and builds them with
#      --target cpu,cuda;
#   3. compiles each <variant>.cu with nvcc, as attnc does (in parallel),
#      printing the seconds each took, into the nvcc cache that verify and
#      bench read ($ATTNC_NVCC_CACHE: no variant is compiled twice);
#   4. runs the conformance matrix on the GPU: attnc verify --target cuda
#      --gpu, one process per spec, JOBS at a time (default: the CPUs);
#   5. measures llama3_8b: attnc bench --target cuda --gpu (decode GB/s
#      against a cudaMemcpy device-to-device copy, prefill TFLOP/s) and,
#      when `python3 -c "import torch"` works, torch's
#      scaled_dot_product_attention on the same prefill shape
#      (scripts/bench_sdpa.py) for the attnc/sdpa ratio;
#   6. prints a summary. Exit status 0 only if every step passed.
#
# It fits in 8 minutes on one H200 (GPU_CHECK_BUDGET seconds, default 470,
# bound every step). Environment: JOBS, NVCC (the nvcc to use), ATTNC (a prebuilt
# attnc binary instead of go build), ATTNC_CUDA_ARCH (instead of
# -arch=native, then sm_90), BENCH_SECONDS (default 1), KEEP=1 keeps the
# work directory.
set -euo pipefail

# Only shell builtins until nvcc and the GPU are found, so that a machine
# without them fails here, clearly, whatever its PATH holds.
die() {
	echo "gpu-check: FAIL: $*" >&2
	exit 1
}

here=${BASH_SOURCE[0]%/*}
[[ $here == "${BASH_SOURCE[0]}" ]] && here=.
cd "$here/.." || die "cannot cd to the repository root"
[[ -f go.mod && -d examples ]] || die "$(pwd) is not the attnc repository root"

nvcc=${NVCC:-}
if [[ -z $nvcc ]]; then
	if command -v nvcc >/dev/null 2>&1; then
		nvcc=$(command -v nvcc)
	elif [[ -n ${CUDA_HOME:-} && -x $CUDA_HOME/bin/nvcc ]]; then
		nvcc=$CUDA_HOME/bin/nvcc
	elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
		nvcc=/usr/local/cuda/bin/nvcc
	fi
fi
[[ -n $nvcc && -x $nvcc ]] ||
	die "nvcc not found: install the CUDA toolkit, put nvcc on PATH, or set NVCC=/path/to/nvcc (this check needs nvcc and an NVIDIA GPU)"
export ATTNC_NVCC=$nvcc

gpu_name="unknown"
if command -v nvidia-smi >/dev/null 2>&1; then
	gpus=$(nvidia-smi -L 2>&1) || die "no GPU: nvidia-smi -L failed: $gpus"
	[[ $gpus == *GPU* ]] || die "no GPU: nvidia-smi -L lists none"
	gpu_name=${gpus%%$'\n'*}
elif ! compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
	die "no GPU: neither nvidia-smi nor /dev/nvidia* is present"
fi

budget=${GPU_CHECK_BUDGET:-470}
bench_seconds=${BENCH_SECONDS:-1}
start=$SECONDS

# run CMD...: runs CMD under what is left of the time budget.
run() {
	local left=$((budget - (SECONDS - start)))
	((left > 5)) || die "time budget of ${budget}s spent before: $*"
	timeout --foreground "$left" "$@"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

work=$(mktemp -d "${TMPDIR:-/tmp}/attnc-gpu-check.XXXXXX")
if [[ ${KEEP:-} == 1 ]]; then
	echo "gpu-check: work directory $work (kept)"
else
	trap 'rm -rf "$work"' EXIT
fi
export ATTNC_NVCC_CACHE=$work/nvcc-cache

echo "== gpu-check: $gpu_name; nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# 1. attnc
if [[ -n ${ATTNC:-} ]]; then
	attnc=$ATTNC
	[[ -x $attnc ]] || die "ATTNC=$attnc is not executable"
else
	command -v go >/dev/null 2>&1 || die "go not found (Go 1.26 builds attnc; or set ATTNC=/path/to/attnc)"
	attnc=$work/attnc
	t0=$(now)
	run env GOPROXY="${GOPROXY:-off}" GOFLAGS="${GOFLAGS:--mod=readonly}" go build -o "$attnc" ./cmd/attnc ||
		die "go build ./cmd/attnc failed (without network the module cache must already hold attnc's dependencies; or set ATTNC)"
	echo "== built attnc in $(elapsed "$t0" "$(now)")s"
fi

# 2. in-scope examples
specs=()
names=()
skipped=()
for f in examples/*.attn; do
	if out=$("$attnc" check "$f" 2>&1); then
		specs+=("$f")
		while read -r ok name; do
			[[ $ok == ok ]] && names+=("$name")
		done <<<"$out"
	elif [[ $out == *"not supported yet"* ]]; then
		skipped+=("$(basename "$f" .attn)")
	else
		die "attnc check $f: $out"
	fi
done
((${#specs[@]} > 0)) || die "no example generates kernels"
echo "== in scope: ${names[*]}; skipped (not supported yet): ${skipped[*]:-none}"
run "$attnc" build "${specs[@]}" --target cpu,cuda -o "$work/out" >/dev/null || die "attnc build --target cpu,cuda failed"

# 3. nvcc, one job per variant, with attnc's flags (codegen/cuda.CompileNVCC),
# each library kept in the cache under the name CompileNVCC looks for
# (NVCCCacheName: the source's SHA-256, a dash, the -arch list).
archs=(native sm_90)
[[ -n ${ATTNC_CUDA_ARCH:-} ]] && archs=("$ATTNC_CUDA_ARCH")
arch_list=$(IFS=,; echo "${archs[*]}")
mkdir -p "$ATTNC_NVCC_CACHE"
compile() { # compile NAME: $work/out/NAME.cu -> $work/nvcc/NAME.so and the cache; writes NAME.secs, NAME.log
	local n=$1 t0 a left sum
	t0=$(now)
	for a in "${archs[@]}"; do
		left=$((budget - (SECONDS - start)))
		((left > 5)) || return 1
		if timeout "$left" "$nvcc" -O3 -arch="$a" -shared -Xcompiler -fPIC -o "$work/nvcc/$n.so" "$work/out/$n.cu" >>"$work/nvcc/$n.log" 2>&1; then
			echo "$(elapsed "$t0" "$(now)") -arch=$a" >"$work/nvcc/$n.secs"
			sum=$(sha256sum <"$work/out/$n.cu") || return 1
			cp "$work/nvcc/$n.so" "$ATTNC_NVCC_CACHE/${sum%% *}-$arch_list.so" || return 1
			return 0
		fi
	done
	return 1
}
join() { # join SEP ITEMS...
	local sep=$1 out=""
	shift
	for x in "$@"; do out+=${out:+$sep}$x; done
	echo "$out"
}
mkdir -p "$work/nvcc"
pids=()
for n in "${names[@]}"; do
	compile "$n" &
	pids+=($!)
done
compile_summary=()
compile_failed=0
for i in "${!names[@]}"; do
	n=${names[$i]}
	if wait "${pids[$i]}"; then
		read -r secs flag <"$work/nvcc/$n.secs"
		echo "   nvcc $n.cu: ${secs}s ($flag)"
		compile_summary+=("$n ${secs}s")
	else
		echo "   nvcc $n.cu: FAILED" >&2
		cat "$work/nvcc/$n.log" >&2
		compile_summary+=("$n FAILED")
		compile_failed=1
	fi
done
((SECONDS - start < budget)) || die "time budget of ${budget}s spent compiling"

# 4. the conformance matrix on the GPU, one verify per spec, JOBS at once
# (each prints "N passed, M failed" last); their outputs in spec order.
status=0
njobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
((njobs > 0)) || njobs=1
echo "== attnc verify --target cuda --gpu ${specs[*]} ($njobs at a time)"
mkdir -p "$work/verify"
for i in "${!specs[@]}"; do
	while (($(jobs -rp | wc -l) >= njobs)); do wait -n || true; done
	(
		rc=0
		run "$attnc" verify "${specs[$i]}" --target cuda --gpu >"$work/verify/$i.txt" 2>&1 || rc=$?
		echo "$rc" >"$work/verify/$i.rc"
	) &
done
wait
verify_passed=0
verify_failed=0
verify_broken=()
for i in "${!specs[@]}"; do
	[[ $(cat "$work/verify/$i.rc" 2>/dev/null) == 0 ]] || status=1
	cat "$work/verify/$i.txt"
	last=$(tail -n 1 "$work/verify/$i.txt")
	if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
		verify_passed=$((verify_passed + BASH_REMATCH[1]))
		verify_failed=$((verify_failed + BASH_REMATCH[2]))
	else
		verify_broken+=("$(basename "${specs[$i]}" .attn): $last")
	fi
done
verify_summary="$verify_passed passed, $verify_failed failed"
if ((${#verify_broken[@]} > 0)); then
	verify_summary+="; no result from $(join "; " "${verify_broken[@]}")"
fi
((status == 0)) || verify_summary="FAILED: $verify_summary"

# 5. llama3_8b on the GPU
field() { # field KEY LINE: the value of KEY=value in LINE
	local kv kvs
	read -ra kvs <<<"$2"
	for kv in "${kvs[@]}"; do
		[[ $kv == "$1="* ]] && { echo "${kv#*=}"; return 0; }
	done
	echo "?"
}
decode_summary="not run"
prefill_summary="not run"
sdpa_summary="skipped: python3 -c 'import torch' failed (no torch)"
echo "== attnc bench --target cuda --gpu examples/llama3_8b.attn"
if run "$attnc" bench examples/llama3_8b.attn --target cuda --gpu --seconds "$bench_seconds" | tee "$work/bench.txt"; then
	header=$(grep '^bench llama3_8b ' "$work/bench.txt" || true)
	dec=$(grep '^decode  llama3_8b ' "$work/bench.txt" || true)
	pre=$(grep '^prefill llama3_8b ' "$work/bench.txt" || true)
	decode_summary="$(field gbps "$dec") GB/s K+V read = $(field ratio_vs_copy "$dec") x cudaMemcpy D2D ($(field copy_gbps "$dec") GB/s read+write); batch $(field batch "$dec"), kv_len $(field kv_len "$dec")"
	attnc_tflops=$(field tflops "$pre")
	prefill_summary="$attnc_tflops TFLOP/s (q_len = kv_len = $(field q_len "$pre"), causal=$(field causal "$pre"))"
	if python3 -c "import torch" >/dev/null 2>&1; then
		causal_flag=()
		[[ $(field causal "$pre") == true ]] && causal_flag=(--causal)
		echo "== torch scaled_dot_product_attention, same shape"
		if sdpa=$(run python3 scripts/bench_sdpa.py --batch 1 --q-len "$(field q_len "$pre")" --kv-len "$(field kv_len "$pre")" \
			--heads "$(field qo_heads "$header")" --kv-heads "$(field kv_heads "$header")" \
			--head-dim "$(field head_dim_qk "$header")" --head-dim-v "$(field head_dim_v "$header")" \
			--dtype "$(field dtype "$header")" "${causal_flag[@]}" --seconds "$bench_seconds"); then
			echo "$sdpa"
			sdpa_line=$(grep '^sdpa ' <<<"$sdpa" || true)
			sdpa_tflops=$(field tflops "$sdpa_line")
			ratio=$(awk -v a="$attnc_tflops" -v b="$sdpa_tflops" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "?" }')
			sdpa_summary="$sdpa_tflops TFLOP/s (torch $(field torch "$sdpa_line"), $(field dtype "$sdpa_line")); attnc/sdpa = $ratio"
		else
			status=1
			sdpa_summary="FAILED (scripts/bench_sdpa.py)"
		fi
	fi
else
	status=1
	decode_summary="FAILED"
	prefill_summary="FAILED"
fi
((compile_failed == 0)) || status=1

echo
echo "==== gpu-check summary ===="
echo "GPU:          $gpu_name"
skipped_list=$(join ", " "${skipped[@]}")
echo "examples:     $(join ", " "${names[@]}") (skipped, not supported yet: ${skipped_list:-none})"
echo "nvcc compile: $(join ", " "${compile_summary[@]}")"
echo "verify:       $verify_summary"
echo "decode:       $decode_summary"
echo "prefill:      $prefill_summary"
echo "torch sdpa:   $sdpa_summary"
echo "elapsed:      $((SECONDS - start))s of ${budget}s"
if ((status == 0)); then
	echo "result:       PASS"
else
	echo "result:       FAIL"
fi
exit "$status"
