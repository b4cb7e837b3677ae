"""A DLPack producer written with ctypes: tensors that claim to live on a CUDA device (or the
host) at an address nothing reads. kjit validates arguments on the host before any driver call,
so these reach every argument rule. Valid ones must never reach a launch: their device is
ABSENT_DEVICE, an ordinal this machine does not have (0 without a GPU, where the driver is
missing; device_count() with one), so they stop when kjit opens the device (DriverError, or
InvalidArgument naming the device), before any kernel or stream sees the fake pointers."""
import ctypes


def _absent_device():
    try:
        import kjit
        return kjit.device_count()
    except Exception:
        return 0


ABSENT_DEVICE = _absent_device()

_CODES = {"bf16": (4, 16), "f16": (2, 16), "f32": (2, 32), "i32": (0, 32), "i64": (0, 64), "u8": (1, 8),
          "bool": (6, 8), "e4m3": (10, 8), "e5m2": (12, 8), "u16": (1, 16)}
_SIZES = {name: bits // 8 for name, (_, bits) in _CODES.items()}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_next_address = [0x7f0000000000]


class FakeTensor:
    """shape, dtype name ("bf16", ...), strides in elements (None: contiguous), device (-1: host;
    None: ABSENT_DEVICE)."""

    def __init__(self, shape, dtype="bf16", strides=None, device=None, address=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        if strides is None:
            strides, s = [], 1
            for n in reversed(self.shape):
                strides.insert(0, s)
                s *= max(n, 1)
        self.strides = tuple(strides)
        self.device = ABSENT_DEVICE if device is None else device
        if address is None:
            address = _next_address[0]
            _next_address[0] += 1 << 24
        self.address = address
        self.capsules = 0

    def __dlpack_device__(self):
        return (1, 0) if self.device < 0 else (2, self.device)

    def __dlpack__(self, stream=None, **kwargs):
        n = len(self.shape)
        m = _Managed()
        m._shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        m._strides = (ctypes.c_int64 * max(n, 1))(*self.strides)
        m.dl_tensor.data = self.address
        m.dl_tensor.device = _Device(1, 0) if self.device < 0 else _Device(2, self.device)
        m.dl_tensor.ndim = n
        code, bits = _CODES[self.dtype]
        m.dl_tensor.dtype = _DType(code, bits, 1)
        m.dl_tensor.shape = ctypes.cast(m._shape, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.strides = ctypes.cast(m._strides, ctypes.POINTER(ctypes.c_int64))
        self._keep = getattr(self, "_keep", []) + [m]  # no deleter: this object owns the struct
        self.capsules += 1
        self.last_stream = stream
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)
