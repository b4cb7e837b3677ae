"""Operating kjit in a serving process: freeze JIT after warm-up, listen to what the runtime does,
and export its counters. Every function acts on the process-wide Runtime unless `runtime=` names
another kjit.Runtime.
"""
from __future__ import annotations

import atexit
from typing import Callable, Optional

from . import _C
from ._names import alternatives

#: The JIT modes, in JitMode's order: each stricter than the one before about compiling (the
#: C++ table kJitModeNames).
JIT_MODES = _C.jit_modes
# freeze() takes the modes stricter than the first ("on": unfreeze() returns to KJIT_JIT).
_FREEZE_MODES = JIT_MODES[1:]


def freeze(mode: str = "off", *, runtime: Optional[_C.Runtime] = None) -> None:
    """After warm-up: a later miss (a specialization neither in memory nor in the disk cache, so it
    would be compiled) warns once per specialization ("warn"); runs a kjit op's fallback (a built
    program of the same op differing only in performance-only parameters) while the exact one
    compiles in the background ("async", as KJIT_JIT=async); or raises kjit.JitDisabled naming
    the family, parameters, target and the `kjit compile` command that builds it ("off"). What
    warm-up obtained keeps running, and a disk hit is still served (a precompiled cache is how a
    frozen process gets new specializations). Never looser than KJIT_JIT (the order is on, warn,
    async, off). Raises ValueError (kjit.InvalidArgument) for a mode other than "warn", "async"
    or "off"."""
    if mode not in _FREEZE_MODES:
        raise _C.InvalidArgument(f"kjit.freeze('{mode}'): the mode is one of {alternatives(_FREEZE_MODES, ', ')} "
                                 f"(kjit.unfreeze() undoes it)")
    _C._freeze(mode, runtime)


def unfreeze(*, runtime: Optional[_C.Runtime] = None) -> None:
    """Undoes freeze(): misses follow KJIT_JIT again."""
    _C._unfreeze(runtime)


def jit_mode(*, runtime: Optional[_C.Runtime] = None) -> str:
    """The mode misses follow now: "on", "warn", "async" or "off" (the stricter of KJIT_JIT and
    freeze)."""
    return _C._jit_mode(runtime)


def add_listener(listener: Callable[[dict], None], *, runtime: Optional[_C.Runtime] = None) -> int:
    """Calls `listener(event)` on every compile, disk hit, load, rejected cache entry and refused
    JIT, and under KJIT_JIT=async on every fallback built, background compile done or abandoned
    (queued when the runtime finished its background compiles) and miss without a fallback.
    `event` is a dict: kind ("compile", "disk_hit", "load", "rejected", "refused",
    "fallback_launch", "background_compile_done", "no_fallback", "background_compile_abandoned"),
    key, family, params, target, ms (float, wall time of the compile / disk read / load), device
    (-1 when none) and detail (why an entry was rejected or a miss refused; which fallback served;
    "re-capture" when a CUDA graph captured a fallback of a program now built; "abandoned: ..."
    for a compile that never ran). The listener runs on the thread that did the work (a background
    compile's thread for its events, the finishing thread for an abandoned one), holding the GIL; an
    exception it raises is reported once and never reaches the op. It must not compile or load
    through kjit itself. Returns an id for remove_listener."""
    if not callable(listener):
        raise _C.InvalidArgument("kjit.add_listener: the listener is not callable")
    listener_id = _C._add_listener(listener, runtime)
    _finish_background_at_exit(runtime)
    return listener_id


_finishing = set()


def _finish_background_at_exit(runtime):
    """With a Python listener, KJIT_JIT=async's background compiles call into Python: they must end
    before the interpreter finalizes, not at the C++ runtime's exit (which comes after it)."""
    key = None if runtime is None else runtime.id
    if key not in _finishing:
        _finishing.add(key)
        atexit.register(_C._finish_background, runtime)


def remove_listener(listener_id: int, *, runtime: Optional[_C.Runtime] = None) -> bool:
    """Unregisters a listener; False when the id is not registered."""
    return _C._remove_listener(listener_id, runtime)


def stats(*, runtime: Optional[_C.Runtime] = None) -> dict:
    """Counters and state of the Runtime: memory_hits, disk_hits, misses, compiles,
    compile_failures, loads, load_rebuilds, refused, compile_ms, the fleet tier's remote_*,
    KJIT_JIT=async's fallback_launches, no_fallback, background_compiles, background_failures,
    background_abandoned and background_queue_full, jit_mode, frozen, and the disk cache's
    cache_entries and cache_bytes (None before its first publish or when disabled),
    cache_max_bytes, cache_writable."""
    return _C._stats(runtime)


def metrics_text(*, runtime: Optional[_C.Runtime] = None) -> str:
    """stats() in the Prometheus text exposition format (kjit_compiles_total,
    kjit_compile_seconds, kjit_disk_hits_total, kjit_cache_entries, ...), for a server's own
    /metrics endpoint."""
    return _C._metrics_text(runtime)
