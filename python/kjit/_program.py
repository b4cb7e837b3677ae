"""User kernels: a Program is one CUDA C++ source and the template instantiations to emit from it
(kjit::ProgramSpec). Compiling goes through a kjit Runtime (the process-wide one unless
`runtime=` names another): the same cache key, disk cache and single flight as the shipped ops.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import _C


def _target_text(method: str, target) -> str:
    """`target` itself when it is a str; else a TypeError naming the method and what it got (the
    extension's own error would print its whole internal signature)."""
    if not isinstance(target, str):
        raise TypeError(f"Program.{method}: target must be a str such as 'sm_90a' or 'compute_90', "
                        f"got {type(target).__name__}")
    return target


class Program:
    """One translation unit for NVRTC.

    source: the CUDA C++ text; None reads `source_name` from kjit's own kernel sources.
    name_expressions: one per kernel to emit, e.g. ["saxpy<256>"]; kernels are then looked up by
        these names (or their index).
    options: extra NVRTC options ("-DN=4", "--use_fast_math", "-I", "dir", ...); an option that
        sets the architecture is an InvalidArgument (the target does that).
    headers: {include name: text} (or (name, text) pairs) the source may #include.
    family / template_args: metadata shown by `kjit cache ls`.
    source_name: the name NVRTC errors use for the source.
    arch_specific: load() compiles for the device's own target (sm_90a on an H100/H200), as a
        program using wgmma or setmaxnreg needs; False compiles for the plain sm_XY (a cubin
        every device of that compute capability loads; kjit's own ops do this for every kernel
        that needs no arch-specific instruction). compile() and key() take the target as given.
    std_headers: NVRTC has no standard library; with True (the default) an #include of a
        standard header kjit supplies (<cstdint>, <cmath>, <type_traits>, <algorithm>, <cstdio>,
        ... and the C forms such as <math.h>) gets kjit's NVRTC-safe version, so CUDA code that
        nvcc compiles compiles here unmodified; a host-only call (fopen, exit, ...) is a compile
        error naming its header. False hands NVRTC only what the program and its -I directories
        supply. A program that includes no standard header has the same key either way.

    A kernel takes one params struct by value (the kjit convention); Kernel.launch passes the
    bytes of a ctypes.Structure (or any bytes-like object) as that struct, checked against the
    kernel's parameter size.
    """

    def __init__(self, source: Optional[str], name_expressions: Sequence[str], *,
                 options: Iterable[str] = (), headers: Union[Mapping[str, str], Iterable[Tuple[str, str]], None] = None,
                 family: str = "user", source_name: str = "kernel.cu", template_args: str = "",
                 arch_specific: bool = True, std_headers: bool = True):
        if isinstance(name_expressions, str):
            name_expressions = [name_expressions]
        self.source = source
        self.name_expressions = list(name_expressions)
        self.options = list(options)
        self.headers = dict(headers) if isinstance(headers, Mapping) else (list(headers) if headers else None)
        self.family = family
        self.source_name = source_name
        self.template_args = template_args
        try:
            self.arch_specific = _C._flag(arch_specific)  # True/False, a NumPy bool or an int, as every flag
        except TypeError:
            raise TypeError(f"Program: arch_specific must be True or False (or a NumPy bool or an int), "
                            f"got {type(arch_specific).__name__}") from None
        try:
            self.std_headers = _C._flag(std_headers)
        except TypeError:
            raise TypeError(f"Program: std_headers must be True or False (or a NumPy bool or an int), "
                            f"got {type(std_headers).__name__}") from None

    def _spec(self):
        return (self.source, self.name_expressions, self.options, self.headers, self.family, self.source_name,
                self.template_args, self.std_headers)

    def compile(self, target: str = "sm_90a", *, runtime: Optional[_C.Runtime] = None) -> _C.CompiledProgram:
        """Compiles for `target` ("sm_90a", "sm_80", "compute_90" for PTX), or finds it in the
        in-memory table or the disk cache. Needs no GPU. Raises CompileError with the NVRTC log,
        TypeError when `target` is not a str."""
        return _C._compile(*self._spec(), _target_text("compile", target), runtime)

    def key(self, target: str = "sm_90a", *, runtime: Optional[_C.Runtime] = None) -> str:
        """The cache key compile() would use (32 hex digits), without compiling."""
        return _C._key(*self._spec(), _target_text("key", target), runtime)

    def load(self, device: Optional[int] = None, *, runtime: Optional[_C.Runtime] = None) -> _C.Module:
        """Compiles (or fetches) for the device's target (see arch_specific) and loads it once per
        device. device None: the current CUDA context's device (device 0's primary context when
        none is current)."""
        return _C._load(*self._spec(), device, runtime, self.arch_specific)

