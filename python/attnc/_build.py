"""Finding the attnc binary, compiling specs with ``attnc build --shared`` and
caching the results.

The cache holds one folder per compiled spec, named by a hash of the spec
text, the attnc binary's identity (its ``attnc version`` line and the
SHA-256 of the executable), the target and the CPU triple. A folder is
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

__all__ = ["CompileError", "default_cache_dir", "find_attnc", "cpu_triple", "build_spec"]


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


def cache_key(spec_text, target, triple, binary, cache_dir):
    """cache_key names a compiled spec in the cache."""
    h = hashlib.sha256()
    for part in (spec_text, _binary_identity(binary, cache_dir), target, triple):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def build_spec(spec_text, target="cpu", cache_dir=None):
    """build_spec compiles spec_text (unless the cache has it) and returns the
    folder holding manifest.json and the libraries."""
    if target != "cpu":
        raise NotImplementedError(
            "target=%r: the Python package loads CPU kernels only for now; "
            "build CUDA kernels with `attnc build --target cuda`" % (target,))
    cache_dir = cache_dir or default_cache_dir()
    binary = find_attnc(cache_dir)
    triple = cpu_triple()
    key = cache_key(spec_text, target, triple, binary, cache_dir)
    final = os.path.join(cache_dir, "kernels", key)
    if os.path.isfile(os.path.join(final, "manifest.json")):
        return final
    os.makedirs(os.path.join(cache_dir, "kernels"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=key + ".tmp", dir=os.path.join(cache_dir, "kernels"))
    try:
        spec_path = os.path.join(tmp, "spec.attn")
        with open(spec_path, "w") as f:
            f.write(spec_text)
        args = [binary, "build", spec_path, "--target", target, "--triple", triple, "-o", tmp, "--shared"]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError((r.stderr or r.stdout).strip())
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
