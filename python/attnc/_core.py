"""Loading what ``attnc build --shared`` wrote and calling its entry points:
Module (one build folder), Variant (one variant's library), Kernel (one
entry point, called with DESIGN §4's argument names as keywords).

A variant's target is cpu (the CPU kernels), cuda (the CUDA launchers
compiled with nvcc: buffers are torch CUDA tensors, the stream is torch's
current one) or cuda-emu (the same launchers compiled against attnc's CPU
emulator: buffers in host memory, as for cpu)."""

import ctypes
import json
import os
import re
import threading
import weakref

import numpy as np

from . import _arrays as A
from ._build import TARGET_FILE, build_spec, library_suffix

__all__ = ["Error", "Module", "Variant", "Kernel", "compile", "load", "set_num_threads", "get_num_threads"]


class Error(RuntimeError):
    """Error is a kernel's non-zero status: ``code`` (negative), ``name``
    (the manifest's name, e.g. ``bad_page_id``) and the kernel's strerror
    text as the message."""

    def __init__(self, code, message, name="", role=""):
        self.code = code
        self.name = name
        self.role = role
        super().__init__("%s: status %d (%s): %s" % (role or "attnc", code, name or "error", message))


# Outputs the methods allocate when the caller leaves them out; every other
# output (merge_state's v and s, the page kernels' caches) is read as well as
# written and must be passed.
_ALLOCATABLE = {"o", "lse", "q_out", "k_out", "v_out", "ckv_out", "kpe_out", "k_buf", "v_buf", "ckv_buf", "kpe_buf"}
_ndarray = np.ndarray
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_DIM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:([+-])(\d+))?$")


class _Arg:
    __slots__ = ("name", "buffer", "dtype", "dims", "output", "nullable", "alloc", "index", "np_num", "stream")

    def __init__(self, i, a):
        self.index = i
        self.name = a["name"]
        self.buffer = a["kind"] == "buffer"
        self.stream = a["dtype"] == "cudaStream_t"  # a CUDA launcher's stream (void *)
        self.dtype = a["dtype"]
        self.output = bool(a.get("output"))
        self.nullable = bool(a.get("nullable"))
        self.alloc = self.output and self.name in _ALLOCATABLE
        self.np_num = A.NP_DTYPES[self.dtype].num if self.dtype in A.NP_DTYPES else -1
        self.dims = []
        for d in a.get("shape") or []:
            if d.isdigit():
                self.dims.append((None, int(d)))
                continue
            m = _DIM.match(d)
            if m is None:
                self.dims.append(("?", d))  # not a form attnc writes today: unchecked
                continue
            off = int(m.group(3) or 0)
            self.dims.append((m.group(1), -off if m.group(2) == "-" else off))

    def shape_text(self):
        out = []
        for s, v in self.dims:
            if s is None:
                out.append(str(v))
            elif s == "?":
                out.append(v)
            else:
                out.append(s + ("+%d" % v if v > 0 else ("%d" % v if v < 0 else "")))
        return "[" + ", ".join(out) + "]"


class Kernel:
    """Kernel is one generated entry point. Call it with keyword arguments
    named as in the manifest (DESIGN §4): arrays for buffers, ints for
    scalars. Scalar sizes (``num_pages``, ``batch_size``, ``n``, ...) are
    derived from the arrays when left out; outputs such as ``o`` and ``lse``
    are allocated in the inputs' kind (numpy or torch) when left out, and
    returned (``lse`` only with ``return_lse=True`` or when passed).

    A CUDA launcher (target cuda) takes torch CUDA tensors, all on one
    device, allocates its outputs there and runs on ``stream=`` (a
    torch.cuda.Stream or a cudaStream_t as an int), by default torch's
    current stream of that device; the launch is asynchronous, as torch's own
    kernels are. On the emulator (cuda-emu) the "device" is host memory: the
    arguments are those of the CPU kernels and the call returns when the
    grid has run."""

    def __init__(self, variant, entry, lib):
        self.variant = variant
        self.role = entry["role"]
        self.symbol = entry["symbol"]
        self.manifest = entry
        self.args = [_Arg(i, a) for i, a in enumerate(entry["args"])]
        self._by_name = {a.name: a for a in self.args}
        self._gpu = variant.target == "cuda"
        fn = getattr(lib, self.symbol)
        fn.restype = ctypes.c_int32
        fn.argtypes = [ctypes.c_void_p if a.buffer or a.stream else ctypes.c_int32 for a in self.args]
        self._fn = fn

    def _check_array(self, a, x):
        x = A.as_array(x, a.name)
        if not A.dtype_ok(x, a.dtype):
            raise ValueError("%s: expected %s of shape %s, got %s"
                             % (a.name, A.DTYPE_WORDS.get(a.dtype, a.dtype), a.shape_text(), A.describe(x)))
        if len(x.shape) != len(a.dims):
            raise ValueError("%s: expected %d dimensions %s, got %s"
                             % (a.name, len(a.dims), a.shape_text(), A.describe(x)))
        if self._gpu and not A.is_cuda(x):
            raise ValueError("%s: a CUDA kernel takes torch CUDA tensors, got %s%s"
                             % (a.name, A.describe(x), "" if not A.is_torch(x) else " on " + str(x.device)))
        if not A.is_contiguous(x):
            if a.output:
                raise ValueError("%s: an output must be contiguous (row-major), got strides %s"
                                 % (a.name, list(A.view(x, self._gpu)[2])))
            x = A.contiguous(x)
        return x

    @property
    def arg_names(self):
        return [a.name for a in self.args]

    def __repr__(self):
        return "<attnc kernel %s(%s)>" % (self.symbol, ", ".join(self.arg_names))

    def __call__(self, return_lse=False, **kw):
        for k in kw:
            if k not in self._by_name:
                raise TypeError("%s() got an unexpected keyword argument %r (arguments: %s)"
                                % (self.role, k, ", ".join(self.arg_names)))
        syms = {}
        origin = {}
        cargs = [None] * len(self.args)
        keep = []
        outs = []
        like_torch = False
        device = None
        gpu = self._gpu
        for a in self.args:
            if not a.buffer:
                continue
            x = kw.get(a.name)
            if x is None:
                continue
            if type(x) is _ndarray and x.dtype.num == a.np_num and x.flags.c_contiguous and not gpu:
                # The common case, checked without the general path's calls.
                if x.ndim != len(a.dims):
                    raise ValueError("%s: expected %d dimensions %s, got %s"
                                     % (a.name, len(a.dims), a.shape_text(), A.describe(x)))
                ptr, shape = x.__array_interface__["data"][0], x.shape
            else:
                x = self._check_array(a, x)
                if A.is_torch(x):
                    like_torch = True
                if gpu:
                    if device is None:
                        device, origin[" device"] = x.device, a.name
                    elif x.device != device:
                        raise ValueError("%s: on %s, but %s is on %s (one call runs on one device)"
                                         % (a.name, x.device, origin[" device"], device))
                ptr, shape = A.view(x, gpu)[:2]
            for i, ((s, v), d) in enumerate(zip(a.dims, shape)):
                if s is None:
                    if d != v:
                        raise ValueError("%s: dimension %d must be %d (shape %s), got %s"
                                         % (a.name, i, v, a.shape_text(), A.describe(x)))
                elif s != "?":
                    n = d - v
                    if s in syms:
                        if syms[s] != n:
                            raise ValueError("%s: dimension %d gives %s = %d, but %s gives %s = %d"
                                             % (a.name, i, s, n, origin[s], s, syms[s]))
                    else:
                        if n < 0:
                            raise ValueError("%s: dimension %d (%d) is too small for %s"
                                             % (a.name, i, d, a.shape_text()))
                        syms[s] = n
                        origin[s] = a.name
            keep.append(x)
            cargs[a.index] = ptr
            if a.output:
                outs.append((a, x))
        for a in self.args:
            if a.buffer:
                continue
            if a.stream:
                cargs[a.index] = self._stream(kw.get(a.name), device)
                continue
            if a.name in kw:
                try:
                    v = int(kw[a.name])
                except (TypeError, ValueError):
                    raise ValueError("%s: expected an integer, got %r" % (a.name, kw[a.name]))
                if not _INT32_MIN <= v <= _INT32_MAX:
                    raise ValueError("%s: %d does not fit in int32" % (a.name, v))
                if a.name in syms and syms[a.name] != v:
                    raise ValueError("%s: %d disagrees with %s, which gives %d"
                                     % (a.name, v, origin[a.name], syms[a.name]))
                syms[a.name] = v
            elif a.name in syms:
                v = syms[a.name]
                if v > _INT32_MAX:
                    raise ValueError("%s: %d (from %s) does not fit in int32" % (a.name, v, origin[a.name]))
            else:
                raise ValueError("%s: missing (an integer; no array argument gives it)" % a.name)
            cargs[a.index] = v
        for a in self.args:
            if not a.buffer or cargs[a.index] is not None:
                continue
            if a.nullable and not (a.name == "lse" and return_lse):
                continue
            if not a.alloc:
                raise ValueError("%s: missing (%s %s)" % (a.name, A.DTYPE_WORDS.get(a.dtype, a.dtype), a.shape_text()))
            shape = []
            for s, v in a.dims:
                if s is None:
                    shape.append(v)
                elif s in syms:
                    shape.append(syms[s] + v)
                else:
                    raise ValueError("%s: cannot allocate %s: %s is unknown; pass %s" % (a.name, a.shape_text(), s, a.name))
            x = A.empty(shape, a.dtype, like_torch, device)
            cargs[a.index] = A.view(x, gpu)[0]
            outs.append((a, x))
        st = self._fn(*cargs)
        if st != 0:
            raise self.variant._error(st, self.role)
        outs.sort(key=lambda p: p[0].index)
        if not outs:
            return None
        if len(outs) == 1:
            return outs[0][1]
        return tuple(x for _, x in outs)

    def _stream(self, s, device):
        """_stream is the cudaStream_t to launch on: s (a torch.cuda.Stream or
        an int), else torch's current stream on device (GPU) or 0 (the
        emulator ignores it)."""
        if s is None:
            if not self._gpu:
                return None
            torch = A.torch_module()
            if device is None:
                raise ValueError("stream: no CUDA tensor among the arguments gives the device")
            return torch.cuda.current_stream(device).cuda_stream or None
        if hasattr(s, "cuda_stream"):
            return s.cuda_stream or None
        try:
            return int(s) or None
        except (TypeError, ValueError):
            raise ValueError("stream: expected a torch.cuda.Stream or a cudaStream_t as an int, got %r" % (s,))


_variants = weakref.WeakSet()
_threads = [0]
_threads_lock = threading.Lock()


def set_num_threads(n):
    """set_num_threads sets the worker threads of every loaded variant and of
    those loaded later; n <= 0 restores the default (all online CPUs)."""
    with _threads_lock:
        _threads[0] = int(n)
        for v in list(_variants):
            v.set_num_threads(n)


def get_num_threads():
    """get_num_threads is the count set_num_threads set (0: the default)."""
    return _threads[0]


class Variant:
    """Variant is one compiled variant: ``constraints`` (heads, head dims,
    dtype, page size, layout, scale, lse base, mask clauses, and sinks,
    score and rope when the spec has them, ...), one method per kernel
    role its spec listed (``prefill``, ``decode``, ``merge_state``,
    ``append``, ``copy_page``, ...), ``set_num_threads`` and ``strerror``.
    ``target`` is ``"cpu"``, ``"cuda"`` or ``"cuda-emu"``; a CUDA variant's
    thread settings are no-ops (the emulator reads ``$ATTNC_EMU_THREADS``)
    and its strerror text comes from the manifest."""

    def __init__(self, name, manifest, so_path, target="cpu"):
        self.name = name
        self.path = so_path
        self.target = target
        vm = next(v for v in manifest["variants"] if v["name"] == name)
        self.constraints = dict(vm.get("constraints", {}))
        self.lse_base = vm.get("lse_base", manifest.get("lse_base", "e"))
        self.rules = vm.get("rules", {})
        self._errors = {e["Code"]: e for e in vm.get("errors", [])}
        self._lib = ctypes.CDLL(so_path)
        if target == "cpu":
            self._strerror = getattr(self._lib, name + "_strerror")
            self._strerror.restype = ctypes.c_char_p
            self._strerror.argtypes = [ctypes.c_int32]
            self._set_threads = getattr(self._lib, name + "_set_num_threads")
            self._set_threads.argtypes = [ctypes.c_int32]
            self._get_threads = getattr(self._lib, name + "_get_num_threads")
            self._get_threads.restype = ctypes.c_int32
        self.kernels = {}
        kind = "cpu" if target == "cpu" else "cuda"
        for k in manifest["kernels"]:
            if k.get("variant") == name and k.get("entry") and k.get("target", "cpu") == kind:
                self.kernels[k["role"]] = Kernel(self, k, self._lib)
        if target == "cpu":
            with _threads_lock:
                _variants.add(self)
                if _threads[0]:
                    self.set_num_threads(_threads[0])

    def __getattr__(self, role):
        ks = self.__dict__.get("kernels")
        if ks is not None and role in ks:
            return ks[role]
        raise AttributeError("variant %s has no kernel %r (it has: %s)"
                             % (self.__dict__.get("name"), role, ", ".join(sorted(ks or ()))))

    def __dir__(self):
        return list(super().__dir__()) + list(self.kernels)

    def __repr__(self):
        return "<attnc variant %s (%s): %s>" % (self.name, self.target, ", ".join(self.kernels))

    @property
    def roles(self):
        return list(self.kernels)

    def set_num_threads(self, n):
        if self.target == "cpu":
            self._set_threads(int(n))

    def get_num_threads(self):
        return self._get_threads() if self.target == "cpu" else 0

    def strerror(self, code):
        if self.target == "cpu":
            return self._strerror(int(code)).decode()
        e = self._errors.get(int(code))
        return e.get("Msg", e.get("Name", "")) if e else "unknown status %d" % int(code)

    def _error(self, code, role):
        e = self._errors.get(code, {})
        return Error(code, self.strerror(code), e.get("Name", ""), "%s.%s" % (self.name, role))


def _folder_target(path, manifest):
    """_folder_target is the target a folder's libraries are for: what this
    package recorded when it built the folder, else cpu when the manifest
    has CPU kernels, else cuda."""
    try:
        with open(os.path.join(path, TARGET_FILE)) as f:
            return f.read().strip()
    except OSError:
        pass
    if any(k.get("target", "cpu") == "cpu" for k in manifest.get("kernels", [])):
        return "cpu"
    return "cuda"


class Module:
    """Module is one build folder: ``module["name"]`` is a Variant;
    ``module.variants`` lists them; ``module.manifest`` is manifest.json;
    ``module.target`` the target of its libraries."""

    def __init__(self, path, target=None):
        self.path = path
        with open(os.path.join(path, "manifest.json")) as f:
            self.manifest = json.load(f)
        self.target = target or _folder_target(path, self.manifest)
        kind = "cpu" if self.target == "cpu" else "cuda"
        suffix = library_suffix(self.target)
        self._variants = {}
        for vm in self.manifest.get("variants", []):
            name = vm["name"]
            files = {k["file"] for k in self.manifest["kernels"] if k.get("variant") == name and k.get("target", "cpu") == kind}
            if not files:
                continue
            so = os.path.join(path, os.path.splitext(sorted(files)[0])[0] + suffix)
            if not os.path.isfile(so):
                how = {"cpu": "build with `attnc build --shared`",
                       "cuda": "compile the .cu with `nvcc -O3 -arch=native -shared -Xcompiler -fPIC`",
                       "cuda-emu": "compile the .cu with g++ against attnc's CUDA emulator"}[self.target]
                raise FileNotFoundError("%s: no %s (%s)" % (path, os.path.basename(so), how))
            self._variants[name] = Variant(name, self.manifest, so, self.target)

    def __getitem__(self, name):
        try:
            return self._variants[name]
        except KeyError:
            raise KeyError("no variant %r in %s (variants: %s)" % (name, self.path, ", ".join(self._variants))) from None

    def __contains__(self, name):
        return name in self._variants

    def __iter__(self):
        return iter(self._variants.values())

    def __len__(self):
        return len(self._variants)

    @property
    def variants(self):
        return list(self._variants)

    def __repr__(self):
        return "<attnc module %s: %s>" % (self.path, ", ".join(self._variants))


_modules = {}
_modules_lock = threading.Lock()


def load(path, target=None):
    """load opens a folder written by ``attnc build --shared`` (or by compile:
    its target is recorded there). For a CUDA build, target ``"cuda"`` loads
    ``<variant>.gpu.so`` and ``"cuda-emu"`` ``<variant>.emu.so``, compiled from
    the folder's .cu."""
    path = os.path.abspath(path)
    with _modules_lock:
        m = _modules.get((path, target))
    if m is None:
        m = Module(path, target)
        with _modules_lock:
            m = _modules.setdefault((path, target), m)
    return m


def _spec_text(spec):
    if isinstance(spec, os.PathLike) or ("\n" not in spec and "{" not in spec and os.path.isfile(spec)):
        with open(spec) as f:
            return f.read()
    return spec


def compile(spec, target="cpu", cache_dir=None):
    """compile builds spec (spec text or a path to a .attn file) with
    ``attnc build --shared`` on first use, caching the result under
    cache_dir (default ``$XDG_CACHE_HOME/attnc``), and returns its Module.
    target ``"cuda"`` builds the CUDA launchers with nvcc (methods take torch
    CUDA tensors); ``"cuda-emu"`` compiles the same .cu with g++ against
    attnc's CPU emulator (methods take host arrays, as for ``"cpu"``)."""
    return load(build_spec(_spec_text(spec), target=target, cache_dir=cache_dir))
