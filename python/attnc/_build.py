"""Finding the attnc binary, compiling specs with ``attnc build --shared``
(cpu) or ``attnc build --target cuda`` and nvcc (cuda) or g++ over attnc's
CUDA emulator (cuda-emu), and caching the results.

The cache holds one folder per compiled spec, named by a hash of the spec
text, the attnc binary's identity (its ``attnc version`` line and the
SHA-256 of the executable), the target and the CPU triple (CUDA: the
compiler's version line, nvcc's architectures or the emulator header), and
``$ATTNC_CPU_LEVELS`` when set (``attnc build --cpu-levels``; with ``host``,
this machine's CPU flags too, so that machines sharing a cache never load
another CPU's host build). A folder is
written under a temporary name and renamed into place, so concurrent
processes never see a half-written library.
"""

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading

__all__ = ["CompileError", "default_cache_dir", "find_attnc", "cpu_triple", "cpu_levels", "build_spec", "find_nvcc", "find_cxx", "emu_dir"]


class CompileError(RuntimeError):
    """CompileError reports a spec attnc refused or a build that failed; the
    message holds attnc's own output (``file:line:col: message`` for spec
    errors)."""


_lock = threading.Lock()
_binary_ids = {}  # ((path, size, mtime, inode), cache dir) -> identity string


def default_cache_dir():
    """default_cache_dir is ``$ATTNC_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnc``,
    else ``~/.cache/attnc``."""
    d = os.environ.get("ATTNC_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "attnc")


def cpu_triple():
    """cpu_triple is the attnc triple for this machine's CPU."""
    m = platform.machine().lower()
    if m in ("x86_64", "amd64"):
        return "x86_64-unknown-linux-gnu"
    if m in ("aarch64", "arm64"):
        return "aarch64-unknown-linux-gnu"
    raise NotImplementedError("attnc generates CPU kernels for x86-64 and aarch64 Linux, not %r" % m)


def cpu_levels():
    """cpu_levels is ``$ATTNC_CPU_LEVELS``: a comma list of CPU levels the cpu
    target's kernels are cloned for (``attnc build --cpu-levels``: level
    names such as ``x86-64-v4``, or ``host`` for this machine's best level),
    or None (unset or empty) for every level of the triple."""
    v = os.environ.get("ATTNC_CPU_LEVELS", "").strip()
    return v or None


def _levels_key(levels):
    """_levels_key is the cache key's part for a CPU level list: the list,
    and when it names ``host`` this machine's CPU flags (/proc/cpuinfo), on
    which host depends."""
    part = levels
    if "host" in [l.strip() for l in levels.split(",")]:
        flags = platform.processor()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")):
                        flags = line.strip()
                        break
        except OSError:
            pass
        part += "\0" + flags
    return part


def _checkout_root():
    """_checkout_root is the attnc source checkout holding this package or the
    working directory, or None."""
    starts = [os.path.dirname(os.path.abspath(__file__)), os.getcwd()]
    for start in starts:
        d = start
        while True:
            gm = os.path.join(d, "go.mod")
            if os.path.isfile(gm) and os.path.isdir(os.path.join(d, "cmd", "attnc")):
                try:
                    with open(gm) as f:
                        if "module github.com/attnc/attnc" in f.read(200):
                            return d
                except OSError:
                    pass
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return None


def _source_hash(root):
    """_source_hash hashes the Go sources (and embedded files) of a checkout."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "python", "testdata", "node_modules") and not d.startswith("."))
        for fn in sorted(filenames):
            if fn.endswith((".go", ".mod", ".sum", ".h", ".c")):
                p = os.path.join(dirpath, fn)
                h.update(os.path.relpath(p, root).encode() + b"\0")
                with open(p, "rb") as f:
                    h.update(f.read())
                h.update(b"\0")
    return h.hexdigest()


def find_attnc(cache_dir=None):
    """find_attnc is the path of the attnc binary: ``$ATTNC_BIN``, else ``attnc``
    on PATH, else one built with ``go build`` from the checkout this package
    sits in (once per source state, kept in the cache)."""
    b = os.environ.get("ATTNC_BIN")
    if b:
        if not os.access(b, os.X_OK):
            raise CompileError("ATTNC_BIN=%s is not an executable" % b)
        return b
    b = shutil.which("attnc")
    if b:
        return b
    root = _checkout_root()
    if root is None or shutil.which("go") is None:
        raise CompileError(
            "attnc not found: set ATTNC_BIN, put attnc on PATH (go install ./cmd/attnc), "
            "or use the package from an attnc checkout with Go installed")
    cache_dir = cache_dir or default_cache_dir()
    out = os.path.join(cache_dir, "bin", "attnc-" + _source_hash(root)[:24])
    if os.access(out, os.X_OK):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp%d" % os.getpid()
    r = subprocess.run(["go", "build", "-buildvcs=false", "-o", tmp, "./cmd/attnc"], cwd=root, capture_output=True, text=True)
    if r.returncode != 0:
        raise CompileError("go build ./cmd/attnc failed in %s:\n%s" % (root, r.stderr))
    os.replace(tmp, out)
    return out


def _binary_identity(path, cache_dir):
    """_binary_identity is attnc's version line plus the executable's hash,
    memoized per (path, size, mtime, inode) in memory and in the cache, so a
    cached load neither hashes the binary nor runs it."""
    st = os.stat(path)
    key = "%s\0%d\0%d\0%d" % (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    with _lock:
        got = _binary_ids.get((key, cache_dir))
    if got:
        return got
    memo = os.path.join(cache_dir, "bin-ids", hashlib.sha256(key.encode()).hexdigest()[:32])
    try:
        with open(memo) as f:
            ident = f.read()
    except OSError:
        ident = ""
    if not ident:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        r = subprocess.run([path, "version"], capture_output=True, text=True)
        ident = r.stdout.strip() + " sha256:" + h.hexdigest()
        os.makedirs(os.path.dirname(memo), exist_ok=True)
        tmp = memo + ".tmp%d" % os.getpid()
        with open(tmp, "w") as f:
            f.write(ident)
        os.replace(tmp, memo)
    with _lock:
        _binary_ids[(key, cache_dir)] = ident
    return ident


def cache_key(spec_text, target, triple, binary, cache_dir, levels=None):
    """cache_key names a compiled spec in the cache; levels is cpu_levels()
    of a cpu build (None: every level, the key it always had)."""
    h = hashlib.sha256()
    parts = [spec_text, _binary_identity(binary, cache_dir), target, triple]
    if levels is not None:
        parts.append(_levels_key(levels))
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


TARGETS = ("cpu", "cuda", "cuda-emu")

# The g++ flags of the CUDA emulator build, as codegen/cuda's EmulatedFlags
# and CompileEmulated give them (attnc has no command that links an emulated
# library, so they are repeated here; the Go test TestEmulatorFlagsMatchGo
# holds the two lists equal):
#   g++ <EMU_FLAGS> -I<emu dir> -shared -fPIC k.cu -o k.so -lpthread
EMU_FLAGS = ["-std=c++17", "-O1", "-fno-strict-aliasing", "-x", "c++", "-DATTNC_EMULATE"]
EMU_HEADER = "attnc_cuda_emu.h"

_tool_ids = {}  # (kind, path) -> identity string


def find_nvcc():
    """find_nvcc is nvcc's path as attnc's GPU tests find it: ``$ATTNC_NVCC``,
    else ``nvcc`` on PATH, else ``$CUDA_HOME/bin/nvcc``, else
    ``/usr/local/cuda/bin/nvcc``; None when there is none."""
    p = os.environ.get("ATTNC_NVCC")
    if p:
        return shutil.which(p)
    p = shutil.which("nvcc")
    if p:
        return p
    for d in [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]:
        if d:
            p = os.path.join(d, "bin", "nvcc")
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return None


def nvcc_archs():
    """nvcc_archs are the -arch values tried in order: ``$ATTNC_CUDA_ARCH``
    alone if set, else native and then sm_90 (an nvcc older than 11.6 does
    not know native)."""
    a = os.environ.get("ATTNC_CUDA_ARCH")
    return [a] if a else ["native", "sm_90"]


def find_cxx():
    """find_cxx is the C++ compiler of the CUDA emulator build: ``$ATTNC_CXX``,
    else g++ on PATH; None when there is none."""
    p = os.environ.get("ATTNC_CXX")
    if p:
        return shutil.which(p)
    return shutil.which("g++")


def emu_dir():
    """emu_dir is the folder holding attnc's CUDA emulator header:
    ``$ATTNC_CUDA_EMU_DIR``, else codegen/cuda/emu of the attnc checkout this
    package sits in (or is used from)."""
    d = os.environ.get("ATTNC_CUDA_EMU_DIR")
    if d:
        if not os.path.isfile(os.path.join(d, EMU_HEADER)):
            raise CompileError("ATTNC_CUDA_EMU_DIR=%s holds no %s" % (d, EMU_HEADER))
        return os.path.abspath(d)
    root = _checkout_root()
    if root is not None:
        d = os.path.join(root, "codegen", "cuda", "emu")
        if os.path.isfile(os.path.join(d, EMU_HEADER)):
            return d
    raise CompileError("target='cuda-emu' needs attnc's CUDA emulator header (%s): use the package from an attnc "
                       "checkout, or set ATTNC_CUDA_EMU_DIR to the folder holding it (codegen/cuda/emu)" % EMU_HEADER)


def _tool_identity(kind, path, extra=b""):
    """_tool_identity is a compiler's path, first version line and extra
    (the emulator header's text), memoized per process: part of the cache
    key, so a new compiler or header builds afresh."""
    key = (kind, path, hashlib.sha256(extra).hexdigest())
    got = _tool_ids.get(key)
    if got is None:
        r = subprocess.run([path, "--version"], capture_output=True, text=True)
        lines = [l for l in (r.stdout or "").splitlines() if l.strip()]
        got = "%s %s %s %s" % (kind, path, lines[-1] if kind == "nvcc" and lines else (lines[0] if lines else ""), key[2])
        _tool_ids[key] = got
    return got


def _device_tools(target):
    """_device_tools returns (compile function, identity) of a CUDA target's
    library build; it raises CompileError naming what is missing."""
    if target == "cuda":
        nvcc = find_nvcc()
        if nvcc is None:
            raise CompileError("target='cuda' needs nvcc (the CUDA toolkit: nvcc on PATH, $ATTNC_NVCC, $CUDA_HOME or "
                               "/usr/local/cuda); target='cuda-emu' runs the same kernels on the CPU emulator with g++")
        archs = nvcc_archs()
        return (lambda cu, so: _nvcc(nvcc, archs, cu, so)), _tool_identity("nvcc", nvcc, ",".join(archs).encode())
    cxx = find_cxx()
    if cxx is None:
        raise CompileError("target='cuda-emu' needs g++ (apt-get install g++, or set ATTNC_CXX)")
    d = emu_dir()
    with open(os.path.join(d, EMU_HEADER), "rb") as f:
        header = f.read()
    return (lambda cu, so: _emu(cxx, d, cu, so)), _tool_identity("cxx", cxx, header + " ".join(EMU_FLAGS).encode())


def _run_tool(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise CompileError("%s failed (exit %d):\n%s" % (" ".join(args), r.returncode, (r.stderr + r.stdout).strip()))


def _emu(cxx, d, cu, so):
    _run_tool([cxx] + EMU_FLAGS + ["-I" + d, "-shared", "-fPIC", cu, "-o", so, "-lpthread"])


def _nvcc(nvcc, archs, cu, so):
    errs = []
    for arch in archs:
        args = [nvcc, "-O3", "-arch=" + arch, "-shared", "-Xcompiler", "-fPIC", "-o", so, cu]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode == 0:
            return
        out = (r.stderr + r.stdout).strip()
        errs.append("%s failed (exit %d):\n%s" % (" ".join(args), r.returncode, out))
        if "arch" not in out and "native" not in out:
            break  # only an architecture nvcc does not know is worth another try
    raise CompileError("\n".join(errs))


def library_suffix(target):
    """library_suffix is the file name ending of a variant's library for a
    target: ``.so`` (cpu), ``.gpu.so`` (cuda) or ``.emu.so`` (cuda-emu)."""
    return {"cpu": ".so", "cuda": ".gpu.so", "cuda-emu": ".emu.so"}[target]


# TARGET_FILE records, in a folder this package built, which of TARGETS its
# libraries are for (a cuda and a cuda-emu build share one manifest form).
TARGET_FILE = "python-target"


def build_spec(spec_text, target="cpu", cache_dir=None):
    """build_spec compiles spec_text for target (unless the cache has it) and
    returns the folder holding manifest.json and the libraries. cpu runs
    ``attnc build --shared`` (with ``--cpu-levels $ATTNC_CPU_LEVELS`` when
    set: cpu_levels); cuda runs ``attnc build --target cuda`` and
    compiles each .cu with nvcc; cuda-emu compiles it with g++ against
    attnc's CUDA emulator instead."""
    if target not in TARGETS:
        raise ValueError("target: expected one of %s, got %r" % (", ".join(repr(t) for t in TARGETS), target))
    cache_dir = cache_dir or default_cache_dir()
    binary = find_attnc(cache_dir)
    levels = None
    if target == "cpu":
        tool, triple, levels = None, cpu_triple(), cpu_levels()
    else:
        tool, triple = _device_tools(target)
    key = cache_key(spec_text, target, triple, binary, cache_dir, levels)
    final = os.path.join(cache_dir, "kernels", key)
    if os.path.isfile(os.path.join(final, "manifest.json")):
        return final
    os.makedirs(os.path.join(cache_dir, "kernels"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=key + ".tmp", dir=os.path.join(cache_dir, "kernels"))
    try:
        spec_path = os.path.join(tmp, "spec.attn")
        with open(spec_path, "w") as f:
            f.write(spec_text)
        if target == "cpu":
            args = [binary, "build", spec_path, "--target", target, "--triple", triple, "-o", tmp, "--shared"]
            if levels is not None:
                args += ["--cpu-levels", levels]
        else:
            args = [binary, "build", spec_path, "--target", "cuda", "-o", tmp]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError((r.stderr or r.stdout).strip())
        if tool is not None:
            for fn in sorted(os.listdir(tmp)):
                if fn.endswith(".cu"):
                    tool(os.path.join(tmp, fn), os.path.join(tmp, fn[:-3] + library_suffix(target)))
        with open(os.path.join(tmp, TARGET_FILE), "w") as f:
            f.write(target + "\n")
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process finished the same build first: use its folder.
            if not os.path.isfile(os.path.join(final, "manifest.json")):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
