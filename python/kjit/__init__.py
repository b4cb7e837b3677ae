"""kjit from Python: JIT-compile CUDA kernels (NVRTC, content-addressed disk cache, single flight)
and call kjit's shipped ops on any DLPack tensor (PyTorch, CuPy, JAX, ...).

Importing kjit needs no GPU: the CUDA driver is loaded the first time something launches.

    kjit.Program(source, name_expressions, options=...)   a user kernel (like CuPy's RawModule)
        .compile("sm_90a")  -> CompiledProgram            cubin/PTX, registers, spills, smem; no GPU
        .load(device=0)     -> Module; module.kernel(name).launch(grid, block, params, stream=...)
    kjit.rotary, kjit.attention.*, kjit.mla.swa_decode, kjit.fp8.*   the shipped ops
    kjit.torch                                            the ops as torch.library ops (torch.compile)
    kjit.freeze({freeze_modes}), kjit.add_listener(fn), kjit.stats(), kjit.metrics_text()
                                                          operating a serving process (after warm-up)

On/off arguments of every call (causal=, return_lse=, b_constant=, arch_specific=, ...) take True or
False, a NumPy bool, or an int (nonzero is on), as bool() reads them; a string, a float or None
raises TypeError instead of passing for True.

Errors: kjit.Error and its subclasses InvalidArgument (also a ValueError), Unsupported,
CompileError (.log: the NVRTC log), DriverError (.code), CacheError, JitDisabled (.family, .params,
.target, .command), with the C++ messages.

Names, as tuples (kjit.attention and kjit.fp8 export their own):
    JIT_MODES       what kjit.jit_mode() returns: {jit_modes}
    ROTARY_STYLES   what kjit.rotary's style= takes: {rotary_styles}
"""
from . import _C
from ._C import (
    CacheError,
    CompileError,
    CompiledProgram,
    DriverError,
    Error,
    InvalidArgument,
    JitDisabled,
    Kernel,
    KernelInfo,
    Module,
    Runtime,
    Unsupported,
    clear_workspaces,
    device_count,
    device_info,
    device_target,
    driver_available,
    driver_unavailable_reason,
    workspace_bytes_held,
)
from ._program import Program
from ._operate import JIT_MODES, add_listener, freeze, jit_mode, metrics_text, remove_listener, stats, unfreeze
from ._operate import _FREEZE_MODES
from ._C import rotary
from ._C import rotary_styles as ROTARY_STYLES
from ._names import fill_doc
from . import attention, fp8, mla

__version__ = _C.__version__
__doc__ = fill_doc(__doc__, freeze_modes=_FREEZE_MODES, jit_modes=JIT_MODES, rotary_styles=ROTARY_STYLES)

__all__ = [
    "JIT_MODES", "ROTARY_STYLES", "CacheError", "CompileError", "CompiledProgram", "DriverError", "Error", "InvalidArgument", "Kernel",
    "JitDisabled", "KernelInfo", "Module", "Program", "Runtime", "Unsupported", "add_listener", "attention",
    "clear_workspaces", "device_count", "device_info", "device_target", "driver_available",
    "driver_unavailable_reason", "fp8", "freeze", "jit_mode", "metrics_text", "mla", "remove_listener", "rotary",
    "stats", "unfreeze", "workspace_bytes_held",
]
