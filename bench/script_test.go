package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnc/attnc/cpurt"
	"github.com/attnc/attnc/internal/amxemu"
	"github.com/attnc/attnc/internal/needtool"
)

const gpuCheck = "../scripts/gpu-check.sh"

func TestGPUCheckScriptParses(t *testing.T) {
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	if out, err := exec.Command(bash, "-n", gpuCheck).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", gpuCheck, err, out)
	}
	b, err := os.ReadFile(gpuCheck)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"set -euo pipefail", "verify", "--target cuda --gpu", "bench", "scripts/bench_sdpa.py", `python3 -c "import torch"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not contain %q", gpuCheck, want)
		}
	}
	if st, err := os.Stat(gpuCheck); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable: %v", gpuCheck, err)
	}
}

func TestBenchSDPAScriptCompiles(t *testing.T) {
	py, err := exec.LookPath("python3")
	needtool.Check(t, err)
	out, err := exec.Command(py, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", "../scripts/bench_sdpa.py").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/bench_sdpa.py does not parse: %v\n%s", err, out)
	}
}

// Without nvcc the script stops at once, nonzero, and says why.
func TestGPUCheckWithoutNVCC(t *testing.T) {
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	if p, err := exec.LookPath("nvcc"); err == nil {
		t.Skipf("nvcc is installed (%s)", p)
	}
	if _, err := os.Stat("/usr/local/cuda/bin/nvcc"); err == nil {
		t.Skip("nvcc is installed in /usr/local/cuda")
	}
	script, err := filepath.Abs(gpuCheck)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script)
	cmd.Dir = t.TempDir() // the script finds the repository from its own path
	cmd.Env = []string{"PATH=" + t.TempDir(), "HOME=" + t.TempDir(), "CUDA_HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() == 0 {
		t.Fatalf("gpu-check.sh without nvcc: %v (want a nonzero exit)\n%s", err, out)
	}
	if !strings.Contains(string(out), "gpu-check: FAIL: nvcc not found") {
		t.Errorf("gpu-check.sh without nvcc does not say so:\n%s", out)
	}
}

// fakeTools are stand-ins for nvcc, nvidia-smi, python3 (with torch) and
// attnc, so that the script's flow (scope, parallel compiles with the
// -arch fallback, verify, bench, torch ratio, summary, exit status) runs
// without a GPU.
var fakeTools = map[string]string{
	"nvcc": `#!/bin/sh
if [ "$1" = --version ]; then echo "Cuda compilation tools, release 12.4, V12.4.131"; exit 0; fi
case "$*" in *-arch=native*) echo "nvcc fatal: Value 'native' is not defined for option 'gpu-architecture'" >&2; exit 1;; esac
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then echo so > "$2"; fi; shift; done
`,
	"nvidia-smi": "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-fake)'\n",
	"python3": `#!/bin/sh
if [ "$1" = -c ]; then exit 0; fi
echo "args: $*"
echo "sdpa torch=2.5.0 dtype=f16 batch=1 q_len=1024 kv_len=1024 heads=32 causal=true calls=9 ms=0.5 tflops=400.0000"
`,
	"attnc": `#!/bin/bash
cmd=$1; shift
case $cmd in
check)
	case $1 in
	*llama3_8b.attn) echo "ok llama3_8b";;
	*mha_softcap.attn) echo "ok mha_softcap";;
	*) echo "$1:2:3: not supported yet: something" >&2; exit 1;;
	esac;;
build)
	while [ $# -gt 0 ]; do if [ "$1" = -o ]; then mkdir -p "$2"; echo llama > "$2/llama3_8b.cu"; echo mha > "$2/mha_softcap.cu"; fi; shift; done;;
verify)
	echo "PASS llama3_8b_prefill_launch decode batch"
	echo "nvcc cache: $(ls "$ATTNC_NVCC_CACHE" | tr '\n' ' ')"
	if [ -n "$FAKE_VERIFY_FAIL" ]; then echo "1 passed, 1 failed"; exit 1; fi
	echo "16 passed, 0 failed";;
bench)
	echo "bench llama3_8b target=cuda-device dtype=f16 qo_heads=32 kv_heads=8 head_dim_qk=128 head_dim_v=128 page_size=16"
	echo "decode  llama3_8b batch=8 kv_len=4096 calls=100 ms=0.1 kv_bytes=134217728 gbps=3000.00 copy=cudaMemcpyD2D copy_ms=0.1 copy_gbps=4000.00 ratio_vs_copy=0.750 gflops=1.0"
	echo "prefill llama3_8b batch=1 q_len=1024 kv_len=1024 causal=true calls=10 ms=0.1 gflops=200000.00 tflops=200.0000 ratio_vs_decode=9.00";;
esac
`,
}

func runFakeGPUCheck(t *testing.T, env ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	for _, tool := range []string{"timeout", "awk", "date", "mktemp", "grep", "tee", "tail", "sed"} {
		_, err := exec.LookPath(tool)
		needtool.Check(t, err)
	}
	dir := t.TempDir()
	for name, src := range fakeTools {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, gpuCheck)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "ATTNC="+filepath.Join(dir, "attnc"),
		"NVCC=", "ATTNC_CUDA_ARCH=", "KEEP=", "TMPDIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestGPUCheckFlowWithFakeTools(t *testing.T) {
	out, code := runFakeGPUCheck(t)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"== in scope: llama3_8b mha_softcap; skipped (not supported yet): ",
		"   nvcc llama3_8b.cu: ", "s (-arch=sm_90)", // native refused: the sm_90 fallback
		"== attnc verify --target cuda --gpu examples/llama3_8b.attn examples/mha_softcap.attn",
		"args: scripts/bench_sdpa.py --batch 1 --q-len 1024 --kv-len 1024 --heads 32 --kv-heads 8 --head-dim 128 --head-dim-v 128 --dtype f16 --causal --seconds 1",
		"GPU:          GPU 0: NVIDIA H200",
		"examples:     llama3_8b, mha_softcap (skipped, not supported yet: ",
		"nvcc compile: llama3_8b ",
		"verify:       32 passed, 0 failed", // two specs, one verify each
		// gpu-check's compiles fill the nvcc cache under
		// cuda.NVCCCacheName's names: sha256 of the source, the -arch list.
		"nvcc cache: " + sha256Hex("mha\n") + "-native,sm_90.so " + sha256Hex("llama\n") + "-native,sm_90.so ", // ls's order
		"decode:       3000.00 GB/s K+V read = 0.750 x cudaMemcpy D2D (4000.00 GB/s read+write); batch 8, kv_len 4096",
		"prefill:      200.0000 TFLOP/s (q_len = kv_len = 1024, causal=true)",
		"torch sdpa:   400.0000 TFLOP/s (torch 2.5.0, f16); attnc/sdpa = 0.500",
		"result:       PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestGPUCheckFailsOnVerifyFailure(t *testing.T) {
	out, code := runFakeGPUCheck(t, "FAKE_VERIFY_FAIL=1")
	if code == 0 || !strings.Contains(out, "verify:       FAILED: 2 passed, 2 failed") || !strings.Contains(out, "result:       FAIL") {
		t.Errorf("exit %d with a failing verify:\n%s", code, out)
	}
	// The bench still ran, for the summary.
	if !strings.Contains(out, "attnc/sdpa = 0.500") {
		t.Errorf("bench did not run after the failing verify:\n%s", out)
	}
}

// With nvcc but no GPU the script stops before compiling anything.
func TestGPUCheckWithoutGPU(t *testing.T) {
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		t.Skip("this machine has a GPU")
	}
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "nvcc"), []byte(fakeTools["nvcc"]), 0o755)
	cmd := exec.Command(bash, gpuCheck)
	cmd.Env = []string{"PATH=" + dir, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), "gpu-check: FAIL: no GPU") {
		t.Errorf("gpu-check.sh without a GPU: %v\n%s", err, out)
	}
}

const profileBench = "../scripts/profile-bench.sh"

func TestProfileBenchScriptParses(t *testing.T) {
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	if out, err := exec.Command(bash, "-n", profileBench).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", profileBench, err, out)
	}
	if st, err := os.Stat(profileBench); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable: %v", profileBench, err)
	}
}

// fakePerf runs the command after "--" of perf record (writing the -o
// file) and prints its arguments for perf report.
const fakePerf = `#!/bin/bash
case $1 in
record)
	while [ "$1" != -- ]; do if [ "$1" = -o ]; then touch "$2"; fi; shift; done
	shift
	if [ "$1" = true ]; then exit 0; fi
	echo "perf record runs: $*"
	exec "$@";;
report) echo "perf report args: $*"; echo "    99.00%  [.] k_decode.par0";;
esac
`

// fakeBench is attnc: bench writes a kernel library and a yardstick into
// --work-dir.
const fakeBench = `#!/bin/bash
[ "$1" = bench ] || exit 1
shift
while [ $# -gt 0 ]; do if [ "$1" = --work-dir ]; then mkdir -p "$2/00-k" "$2/yardsticks"; touch "$2/00-k/k.so" "$2/yardsticks/yardstick-x86-64-v4.so"; fi; shift; done
echo "decode f16 ..."
`

func runFakeProfile(t *testing.T, withPerf bool, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	for _, tool := range []string{"find", "sort", "paste", "grep", "head", "mktemp", "cat", "dirname", "mkdir", "rm", "touch"} {
		_, err := exec.LookPath(tool)
		needtool.Check(t, err)
	}
	bin := t.TempDir()
	for _, tool := range []string{"find", "sort", "paste", "grep", "head", "mktemp", "cat", "dirname", "mkdir", "rm", "touch", "bash"} {
		p, _ := exec.LookPath(tool)
		os.Symlink(p, filepath.Join(bin, tool))
	}
	if withPerf {
		os.WriteFile(filepath.Join(bin, "perf"), []byte(fakePerf), 0o755)
	}
	attnc := filepath.Join(t.TempDir(), "attnc")
	os.WriteFile(attnc, []byte(fakeBench), 0o755)
	dir := t.TempDir()
	cmd := exec.Command(bash, append([]string{profileBench}, args...)...)
	cmd.Env = []string{"PATH=" + bin, "ATTNC=" + attnc, "PROFILE_DIR=" + dir, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(out), dir, "DIR"), code
}

func TestProfileBenchFlow(t *testing.T) {
	out, code := runFakeProfile(t, true)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"perf record runs: ", // the bench ran under perf record
		`bench --work-dir DIR/work --decode f16 --prefill  --seconds 3`,
		"== kernel functions: shares of the samples in k.so,libm.so.6",
		"perf report args: report -i DIR/perf.data --no-children --dsos k.so,libm.so.6 --percentage relative",
		"99.00%  [.] k_decode.par0",
		"== every library",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, code = runFakeProfile(t, true, "--decode", "bf16", "--reps", "3")
	if code != 0 || !strings.Contains(out, "bench --work-dir DIR/work --decode bf16 --reps 3") {
		t.Errorf("flags not passed on (exit %d):\n%s", code, out)
	}
	out, code = runFakeProfile(t, false)
	if code == 0 || !strings.Contains(out, "profile-bench: FAIL: perf not found") || !strings.Contains(out, "callgrind") {
		t.Errorf("without perf: exit %d:\n%s", code, out)
	}
}

// TestAMXStubScript runs scripts/amxstub.sh on a short sequence, bf16
// (f16, which has no x86-64-amx clone, must be refused): its
// rewrite of the x86-64-amx .ll (detect_level, amx_permit, rt.amx_mm32)
// still finds what it rewrites, the stubbed build runs, and it prints a
// TDPBF16PS count and a projection. On a CPU without AVX512-BF16 the
// script must stop at once and say why.
func TestAMXStubScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	needtool.Check(t, cpurt.Tools())
	for _, tool := range []string{"python3", "gcc", "go"} {
		_, err := exec.LookPath(tool)
		needtool.Check(t, err)
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	dir := t.TempDir()
	attnc := filepath.Join(dir, "attnc")
	if out, err := exec.Command("go", "build", "-o", attnc, "../cmd/attnc").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := filepath.Abs("../scripts/amxstub.sh")
	if err != nil {
		t.Fatal(err)
	}
	// AMXSTUB_BUILD_ONLY: the stubbed object only, on any CPU (what
	// scripts/amx-check.sh prepare carries to an AMX machine).
	bo := filepath.Join(dir, "build-only")
	cmd := exec.Command(bash, script, "128", "1")
	cmd.Env = append(os.Environ(), "ATTNC="+attnc, "AMXSTUB_DIR="+bo, "AMXSTUB_BUILD_ONLY=1", "PATH=/usr/lib/llvm-14/bin:"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("amxstub.sh build-only: %v\n%s", err, out)
	} else if fi, err := os.Stat(filepath.Join(bo, "b", "p_stub.o")); err != nil || fi.Size() == 0 {
		t.Errorf("amxstub.sh build-only left no object: %v\n%s", err, out)
	} else if _, err := os.Stat(filepath.Join(bo, "a")); err == nil {
		t.Errorf("amxstub.sh build-only built the x86-64-v4-bf16 library too\n%s", out)
	}
	// f16 has no x86-64-amx clone (cpu.AMXHalfProducts is off): refused.
	cmd = exec.Command(bash, script, "128", "1", "f16")
	cmd.Env = append(os.Environ(), "ATTNC="+attnc, "AMXSTUB_DIR="+filepath.Join(dir, "f16"))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "amxstub: FAIL: f16 prefill has no x86-64-amx clone") {
		t.Errorf("amxstub.sh f16: %v, want the refusal\n%s", err, out)
	}
	for _, c := range []struct{ dtype, base string }{{"bf16", "x86-64-v4-bf16"}} {
		cmd := exec.Command(bash, script, "128", "1", c.dtype)
		cmd.Env = append(os.Environ(), "ATTNC="+attnc, "AMXSTUB_DIR="+filepath.Join(dir, c.dtype), "PATH=/usr/lib/llvm-14/bin:"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if !strings.Contains(string(cpuinfo), "avx512_bf16") {
			if err == nil || !strings.Contains(string(out), "amxstub: FAIL: this CPU lacks AVX512-BF16") {
				t.Fatalf("without AVX512-BF16: %v\n%s", err, out)
			}
			t.Skip("this CPU lacks AVX512-BF16: the script stopped as it should")
		}
		if err != nil {
			t.Fatalf("amxstub.sh %s: %v\n%s", c.dtype, err, out)
		}
		for _, want := range []string{fmt.Sprintf("%-20s best ", c.base), "x86-64-amx, no tiles best ", "TDPBF16PS per call   ", "projected x86-64-amx "} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: output lacks %q:\n%s", c.dtype, want, out)
			}
		}
		if strings.Contains(string(out), "TDPBF16PS per call   0 ") {
			t.Errorf("%s: no TDPBF16PS counted: the stub was not called\n%s", c.dtype, out)
		}
		t.Logf("%s:\n%s", c.dtype, out)
	}
}

// sha256Hex is the SHA-256 of s in hex, as sha256sum prints it.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestAMXMicrobenchmarkChecks builds scripts/amxmb.c with the AMX
// emulator (internal/amxemu) and runs its check mode: every variant that
// computes C in place, rt.amx_mm32's loop order among them, must give the
// same C as the first at every shape, so that its timings on AMX hardware
// compare loops that do the same work.
func TestAMXMicrobenchmarkChecks(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	needtool.Check(t, err)
	dir := t.TempDir()
	emu, err := amxemu.WriteSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "amxmb")
	if out, err := exec.Command(gcc, "-O1", "-mamx-tile", "-mamx-bf16", "-DAMXEMU_CONSTRUCTOR", "-o", exe, "../scripts/amxmb.c", emu, "-lm").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(exe, "3", "check").CombinedOutput()
	if err != nil {
		t.Fatalf("amxmb check: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), ": same"); n != 3 || strings.Contains(string(out), "DIFFERS") {
		t.Errorf("amxmb check: %d variants agree, want 3 (one per shape):\n%s", n, out)
	}
}

const amxCheck = "../scripts/amx-check.sh"

// runFakeAMXCheck runs `scripts/amx-check.sh run` on a bundle whose attnc
// and test binaries are shell scripts that log how they were called (the
// working directory, the arguments, the replay and level variables) and
// fail when $FAKE_FAIL names them.
func runFakeAMXCheck(t *testing.T, env ...string) (out, calls string, code int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	for _, tool := range []string{"tar", "gzip", "gcc", "timeout"} {
		_, err := exec.LookPath(tool)
		needtool.Check(t, err)
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	log := filepath.Join(tmp, "calls.log")
	fake := `#!/bin/sh
echo "$(basename "$0") in $(basename "$PWD"): $* | replay=$(ls "$ATTNC_REPLAY_OBJECTS") ci=$CI level=${ATTNC_CPU_LEVEL:-}" >>"$FAKE_LOG"
[ "$FAKE_FAIL" = "$(basename "$0")" ] && { echo "fake failure"; exit 1; }
echo "ran $(basename "$0")"
`
	for _, p := range []string{"bin/attnc", "bin/cpu.test", "bin/conformance.test", "objects/0123.o"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "check")
	os.Mkdir(dir, 0o755)
	if o, err := exec.Command("tar", "-C", src, "-czf", filepath.Join(dir, "bundle.tar.gz"), "bin", "objects").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, o)
	}
	script, err := filepath.Abs(amxCheck)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script, "run", dir)
	cmd.Env = append(append(os.Environ(), "FAKE_LOG="+log, "OUT=", "ATTNC_CPU_LEVEL=", "ATTNC_REPLAY_OBJECTS=", "CI="), env...)
	b, err := cmd.CombinedOutput()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	c, _ := os.ReadFile(log)
	return string(b), string(c), code
}

// TestAMXCheckRunFlow: `run` unpacks the bundle and runs the AMX checks
// in their packages' folders, replaying the bundle's objects with CI=true
// (a missing tool fails), the bf16 matrix at every level, the bench at the
// detected level and then bf16 at x86-64-v4; it passes when they pass. A
// bundle without the stubbed prefill object (an older one) reports the
// tiles step as not in the bundle, and passes.
func TestAMXCheckRunFlow(t *testing.T) {
	out, calls, code := runFakeAMXCheck(t)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"amx-check: CPU:", "== summary", "cpu: pass", "matrix: pass", "tiles: pass", "bench: pass",
		"tiles: not in this bundle (no p_stub.o): not run"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	levels := "--cpu-levels x86-64,x86-64-v3,x86-64-v4,x86-64-v4-bf16,x86-64-amx"
	for _, want := range []string{
		"cpu.test in cpu: -test.run ^TestAMXBlockInProcess$ -test.v -test.timeout 10m | replay=0123.o ci=true level=\n",
		"conformance.test in conformance: -test.run ^(TestKernelMatrix|TestBF16DenormalOperands|TestAMXRepeatedPage)$ -levels.all -matrix.dtypes bf16 -test.v -test.timeout 20m | replay=0123.o ci=true level=\n",
		"attnc in ", ": bench --threads 2 " + levels + " --decode f32,f16,bf16,f16/i8 --prefill bf16,f16,f32 --seconds 1 | replay=0123.o ci=true level=\n",
		": bench --threads 2 " + levels + " --decode  --prefill bf16 --seconds 1 | replay=0123.o ci=true level=x86-64-v4\n",
	} {
		if !strings.Contains(calls, want) {
			t.Errorf("calls lack %q:\n%s", want, calls)
		}
	}
}

// TestAMXCheckRunFails: a failing step fails the run, after the others
// ran; without a bundle, run says how to make one.
func TestAMXCheckRunFails(t *testing.T) {
	out, calls, code := runFakeAMXCheck(t, "FAKE_FAIL=conformance.test")
	if code == 0 || !strings.Contains(out, "matrix: FAIL") || !strings.Contains(out, "cpu: pass") || !strings.Contains(calls, "attnc in") {
		t.Errorf("exit %d with a failing matrix:\n%s\ncalls:\n%s", code, out, calls)
	}
	bash, err := exec.LookPath("bash")
	needtool.Check(t, err)
	script, err := filepath.Abs(amxCheck)
	if err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command(bash, script, "run", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(b), "amx-check: FAIL: no ") || !strings.Contains(string(b), "scripts/amx-check.sh prepare") {
		t.Errorf("run without a bundle: %v\n%s", err, b)
	}
	if b, err := exec.Command(bash, script).CombinedOutput(); err == nil || !strings.Contains(string(b), "usage: scripts/amx-check.sh prepare|run [DIR]") {
		t.Errorf("no mode: %v\n%s", err, b)
	}
}
