"""Array plumbing shared by the Variant methods and the FlashInfer wrappers:
numpy arrays and torch tensors seen as (pointer, shape, element strides),
dtype names, allocation in the caller's kind (and, for CUDA tensors, on the
caller's device).

torch is optional: it is imported only when a tensor is passed in.
"""

import sys

import numpy as np

# attnc dtype -> numpy storage dtype.
NP_DTYPES = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),  # bf16 bit patterns
    "i32": np.dtype(np.int32),
    "u8": np.dtype(np.uint8),
    "e4m3": np.dtype(np.uint8),
    "e5m2": np.dtype(np.uint8),
    "i8": np.dtype(np.int8),
}

# What an attnc dtype is called in messages.
DTYPE_WORDS = {
    "f32": "float32", "f16": "float16", "bf16": "bfloat16 (numpy: uint16 bit patterns)",
    "i32": "int32", "u8": "uint8", "e4m3": "float8_e4m3 codes (uint8)",
    "e5m2": "float8_e5m2 codes (uint8)", "i8": "int8",
}

# numpy dtype number -> attnc dtype (uint16 arrays carry bf16 bits).
_NUM_NAMES = {np.dtype(t).num: n for t, n in ((np.float32, "f32"), (np.float16, "f16"), (np.uint16, "bf16"),
                                              (np.int32, "i32"), (np.uint8, "u8"), (np.int8, "i8"))}

_torch = None


def torch_module():
    """torch_module is the torch module when it has been imported, else None."""
    global _torch
    if _torch is None:
        _torch = sys.modules.get("torch")
    return _torch


def torch_dtypes():
    torch = torch_module()
    return {
        "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
        "i32": torch.int32, "u8": torch.uint8, "e4m3": torch.uint8,
        "e5m2": torch.uint8, "i8": torch.int8,
    }


def is_torch(x):
    if type(x) is np.ndarray:
        return False
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def attnc_dtype_of(x):
    """attnc_dtype_of names x's element type as attnc does (uint16 numpy arrays
    read as bf16; None if attnc has no such type)."""
    if type(x) is np.ndarray:
        return _NUM_NAMES.get(x.dtype.num)
    if is_torch(x):
        torch = torch_module()
        return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
                torch.int32: "i32", torch.uint8: "u8", torch.int8: "i8"}.get(x.dtype)
    return _NUM_NAMES.get(np.asarray(x).dtype.num)


def dtype_ok(x, want):
    """dtype_ok reports whether x stores attnc dtype want."""
    have = attnc_dtype_of(x)
    if want in ("e4m3", "e5m2"):
        return have == "u8"
    return have == want


def describe(x):
    kind = "torch.Tensor" if is_torch(x) else "numpy array"
    dt = str(x.dtype)
    return "%s of %s %s" % (kind, dt, list(x.shape))


def view(x, device=False):
    """view returns (pointer, shape, element strides, itemsize) of x; a tensor
    outside host memory is refused unless device is true (the GPU kernels
    take device pointers)."""
    if is_torch(x):
        if x.device.type != "cpu" and not device:
            raise ValueError("a %s tensor: these kernels (CPU, or CUDA emulated on the CPU) take host memory: "
                             "numpy arrays or CPU tensors" % x.device)
        return x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.element_size()
    isz = x.itemsize
    return x.__array_interface__["data"][0], x.shape, tuple(s // isz for s in x.strides), isz


def is_contiguous(x):
    if is_torch(x):
        return x.is_contiguous()
    return x.flags.c_contiguous


def contiguous(x):
    if is_torch(x):
        return x.contiguous()
    return np.ascontiguousarray(x)


def is_cuda(x):
    """is_cuda reports whether x is a torch tensor in CUDA device memory."""
    return is_torch(x) and x.device.type == "cuda"


def empty(shape, dtype, like_torch, device=None):
    """empty allocates an uninitialized array: a torch tensor (on device, a
    torch.device, when given) if like_torch or device, else numpy."""
    if like_torch or device is not None:
        torch = torch_module()
        return torch.empty(tuple(shape), dtype=torch_dtypes()[dtype], device=device)
    return np.empty(tuple(shape), dtype=NP_DTYPES[dtype])


def as_array(x, name):
    """as_array accepts numpy arrays, torch tensors and Python sequences (read
    as numpy)."""
    if isinstance(x, np.ndarray) or is_torch(x):
        return x
    if isinstance(x, (list, tuple)) or np.isscalar(x):
        return np.asarray(x)
    raise ValueError("%s: expected a numpy array or a torch tensor, got %s" % (name, type(x).__name__))


def to_numpy(x):
    """to_numpy is a numpy view (or copy) of x; bf16 tensors become uint16."""
    if is_torch(x):
        torch = torch_module()
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).cpu().numpy().view(np.uint16)
        return x.cpu().numpy()
    return np.asarray(x)


def from_numpy(a, like_torch, dtype=None):
    """from_numpy converts a numpy result back into the caller's kind."""
    if not like_torch:
        return a
    torch = torch_module()
    a = np.ascontiguousarray(a)
    if dtype == "bf16" or a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
