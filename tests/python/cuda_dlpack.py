"""Test helper: CUDA device arrays exposed as raw DLPack capsules, with no
array library. It uses only ctypes and the cuda-python runtime bindings
(cuda.bindings, installed with nvidia-cutlass), so the CUDA path of
flashcore._C can be tested on a GPU machine without PyTorch or CuPy.

DeviceArray(host_array) copies a NumPy array to the GPU;
.capsule(perm=None) returns a fresh single-use "dltensor" capsule (NumPy's
strides, optionally with the axes permuted); .to_host() copies back.
"""

from __future__ import annotations

import ctypes

import numpy as np

from cuda.bindings import runtime as cudart  # noqa: E402  (skipped by callers when missing)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),  # NULL: the memory is owned by DeviceArray
]

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_KDLCUDA = 2
_CODES = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16), "int32": (0, 32)}


def _check(result):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"CUDA runtime error {err}")
    return result[1] if isinstance(result, tuple) and len(result) > 1 else None


def device_count() -> int:
    try:
        err, n = cudart.cudaGetDeviceCount()
    except Exception:  # noqa: BLE001 - no driver at all
        return 0
    return int(n) if int(err) == 0 else 0


class DeviceArray:
    def __init__(self, host: np.ndarray, dtype_name: str | None = None):
        host = np.ascontiguousarray(host)
        self.dtype_name = dtype_name or host.dtype.name
        self.host_dtype = host.dtype
        self.shape = host.shape
        self.strides = tuple(s // host.itemsize for s in host.strides)
        self.nbytes = host.nbytes
        self.ptr = int(_check(cudart.cudaMalloc(max(self.nbytes, 1))))
        _check(cudart.cudaMemcpy(self.ptr, host.ctypes.data, self.nbytes,
                                 cudart.cudaMemcpyKind.cudaMemcpyHostToDevice))
        self._keep = []

    def capsule(self, perm=None):
        perm = tuple(range(len(self.shape))) if perm is None else tuple(perm)
        shape = (ctypes.c_int64 * len(perm))(*(self.shape[p] for p in perm))
        strides = (ctypes.c_int64 * len(perm))(*(self.strides[p] for p in perm))
        mt = _DLManagedTensor()
        mt.dl_tensor.data = self.ptr
        mt.dl_tensor.device = _DLDevice(_KDLCUDA, 0)
        mt.dl_tensor.ndim = len(perm)
        code, bits = _CODES[self.dtype_name]
        mt.dl_tensor.dtype = _DLDataType(code, bits, 1)
        mt.dl_tensor.shape = shape
        mt.dl_tensor.strides = strides
        mt.dl_tensor.byte_offset = 0
        mt.manager_ctx = None
        mt.deleter = None
        self._keep.append((mt, shape, strides))
        return _PyCapsule_New(ctypes.addressof(mt), b"dltensor", None)

    def to_host(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.host_dtype)
        _check(cudart.cudaMemcpy(out.ctypes.data, self.ptr, self.nbytes,
                                 cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        return out

    def free(self):
        if self.ptr:
            cudart.cudaFree(self.ptr)
            self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001
            pass


def synchronize():
    _check(cudart.cudaDeviceSynchronize())
