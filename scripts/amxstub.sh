#!/usr/bin/env bash
# amxstub.sh: what x86-64-amx prefill costs besides its tile products,
# measured on any CPU with AVX512-BF16 (no AMX needed), and what the level
# would take with the products at a given TDPBF16PS rate.
#
# Usage: scripts/amxstub.sh [L] [ROUNDS] [DTYPE]     (default 2048 3 bf16)
#
# It builds one variant of DTYPE, bf16 (causal, 32/8 heads, head dim
# 128, page 16: `attnc bench`'s prefill shape; f16 has no x86-64-amx clone
# since 2026-12-04 and is refused) twice: at the level it runs without AMX
# (x86-64-v4-bf16; --shared)
# and at x86-64-amx (.ll only). In the second .ll, detect_level says x86-64-amx,
# amx_permit says yes (as conformance's AMX tests do) and every call of
# rt.amx_mm32 goes to scripts/amxstub.c, which writes the blocks' bytes as
# +0 (an accumulating call writes each tile's +0s to a stack block and
# adds its rows to C's, as the routine does; compiled for x86-64-v4, so in
# 64-byte vectors) and counts the TDPBF16PS the routine would
# issue. scripts/prefillcpu.c then times both libraries on one sequence of L tokens, 1 thread, A B B A
# (the stubbed library's output differs: its products are zeros). The
# projection adds the counted TDPBF16PS at AMX_TDP_CYCLES cycles each (16:
# one per 16 cycles, Sapphire Rapids' throughput) at AMX_GHZ (2.5) to the
# stubbed library's median. The stubbed time runs at this CPU's clock, not
# the AMX CPU's: scale it by the clocks' ratio when comparing across them.
# It includes the stub's own work, zeroing (or reading) the blocks where
# the tiles would store (12-14% of the stubbed library's perf samples on a
# Zen 4, half of it in libc's memset): read a profile with that in mind.
#
# With AMXSTUB_BUILD_ONLY=1 it stops once the stubbed object
# DIR/b/p_stub.o is compiled (no x86-64-v4-bf16 build, no link, no timing,
# no AVX512-BF16 needed): scripts/amx-check.sh carries that object to an
# AMX machine without LLVM and links and times it there.
#
# Environment: QO and KVH (the variant's qo and kv heads, default 32 and
# 8: QO=28 KVH=4 is a GQA group of 7, whose items hold 448 rows),
# ATTNC (a prebuilt attnc; default: go build ./cmd/attnc),
# AMXSTUB_DIR (where the builds stay; default a new temporary directory),
# AMX_GHZ, AMX_TDP_CYCLES. Needs LLVM 14's opt and llc, gcc, python3.
set -euo pipefail

cd "$(dirname "$0")/.."

die() {
	echo "amxstub: FAIL: $*" >&2
	exit 1
}

L=${1:-2048}
rounds=${2:-3}
dtype=${3:-bf16}
case $dtype in
bf16) base=x86-64-v4-bf16 ;;
f16) die "f16 prefill has no x86-64-amx clone: its split products ran 1.2-1.7x slower than x86-64-v4 on AMX hardware (cpu.AMXHalfProducts is off; docs/benchmarks.md)" ;;
*) die "DTYPE is bf16 or f16, not $dtype" ;;
esac
ghz=${AMX_GHZ:-2.5}
cycles=${AMX_TDP_CYCLES:-16}
build_only=${AMXSTUB_BUILD_ONLY:-}
[ -n "$build_only" ] || grep -qw avx512_bf16 /proc/cpuinfo || die "this CPU lacks AVX512-BF16 (x86-64-v4-bf16's code runs besides the tiles)"
tools="opt llc python3"
[ -n "$build_only" ] || tools="$tools gcc"
for t in $tools; do
	command -v "$t" >/dev/null 2>&1 || die "$t not found (LLVM 14: export PATH=/usr/lib/llvm-14/bin:\$PATH)"
done
dir=${AMXSTUB_DIR:-$(mktemp -d)}
mkdir -p "$dir"
attnc=${ATTNC:-}
if [ -z "$attnc" ]; then
	attnc=$dir/attnc
	go build -o "$attnc" ./cmd/attnc
fi
cat >"$dir/p.attn" <<'EOF'
variant p {
  heads    qo = QO, kv = KVH
  head_dim 128
  dtype    DTYPE
  cache    paged(page_size = 16)
  mask     causal
  kernels  prefill
}
EOF
qo=${QO:-32}
kvh=${KVH:-8}
sed -i "s/DTYPE/$dtype/; s/= QO,/= $qo,/; s/= KVH$/= $kvh/" "$dir/p.attn"
[ -n "$build_only" ] || "$attnc" build "$dir/p.attn" -o "$dir/a" --cpu-levels "$base" --shared >/dev/null
"$attnc" build "$dir/p.attn" -o "$dir/b" --cpu-levels x86-64-amx >/dev/null
python3 - "$dir/b/p.ll" "$dir/b/p_stub.ll" <<'EOF'
import sys
s = open(sys.argv[1]).read()
def override(s, name, typ, ret):
    head = 'define internal %s @%s()' % (typ, name)
    if s.count(head) != 1:
        sys.exit('amxstub: FAIL: no single definition of @%s in the .ll' % name)
    s = s.replace(head, 'define internal %s @%s.hw()' % (typ, name))
    return s + '\ndefine internal %s @%s() {\nentry:\n\tret %s %s\n}\n' % (typ, name, typ, ret)
s = override(s, 'p.detect_level', 'i32', '4')  # x86-64-amx's index in the level table
s = override(s, 'p.amx_permit', 'i1', 'true')
head = 'define internal i32 @p.amx_mm32('
if s.count(head) != 1:
    sys.exit('amxstub: FAIL: no rt.amx_mm32 in the .ll')
s = s.replace(head, 'define internal i32 @p.amx_mm32.hw(').replace('@p.amx_mm32(', '@amx_stub(')
s += '\ndeclare i32 @amx_stub(i32*, i32, i32, i32*, i32, i32, float*, i32, i32, i32, i32, i32, i32)\n'
open(sys.argv[2], 'w').write(s)
EOF
opt -O3 "$dir/b/p_stub.ll" -o "$dir/b/p_stub.bc"
llc -O3 -filetype=obj -relocation-model=pic "$dir/b/p_stub.bc" -o "$dir/b/p_stub.o"
if [ -n "$build_only" ]; then
	echo "amxstub: built $dir/b/p_stub.o" >&2
	exit 0
fi
gcc -O3 -march=x86-64-v4 -shared -fPIC -o "$dir/b/p.so" "$dir/b/p_stub.o" scripts/amxstub.c -lm -lpthread
gcc -O2 -o "$dir/prefillcpu" scripts/prefillcpu.c -ldl
QO=$qo KVH=$kvh ATTNC_CPU_LEVEL=x86-64-amx "$dir/prefillcpu" p "$dtype" "$L" "$rounds" "$dir/a/p.so" "$dir/b/p.so" >"$dir/run.txt" 2>&1 ||
	die "prefillcpu: $(cat "$dir/run.txt")"
grep -v -e "OUTPUTS DIFFER" -e "^amxstub:" "$dir/run.txt" | sed "s/^libA/$(printf '%-20s' "$base")/; s/^libB\(.*ms\).*/x86-64-amx, no tiles\1/; s/^B\/A/no tiles \/ $base/"
python3 - "$dir/run.txt" "$rounds" "$ghz" "$cycles" "$L" "$qo" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
rounds, ghz, cycles, L, qo = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
dp = int(re.search(r'amxstub: (\d+) TDPBF16PS', text).group(1))
med = float(re.search(r'libB best [\d.]+ ms  median ([\d.]+) ms', text).group(1))
calls = 2 * rounds + 1  # a first call, then B twice per round (A B B A)
per = dp / calls
tiles = per * cycles / ghz / 1e6  # ms
flop = 2.0 * 2 * 128 * L * (L + 1) / 2 * qo
print('TDPBF16PS per call   %d (%.1f ms at %g cycles each, %g GHz)' % (per, tiles, cycles, ghz))
print('projected x86-64-amx %.1f ms = %.1f besides the tiles + %.1f tiles; %.1f GFLOP/s, the tiles %.0f%% of it'
      % (med + tiles, med, tiles, flop / (med + tiles) / 1e6, 100 * tiles / (med + tiles)))
EOF
echo "builds in $dir"
