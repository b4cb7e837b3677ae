"""User kernels through the Runtime, without a GPU: compile for sm_90a / sm_80 / PTX, read the
resources, the key, the disk cache and the NVRTC errors."""
import os
import re
import subprocess
import sys

import pytest

import kjit

SAXPY = r"""
#include "kjit/config.cuh"
struct SaxpyParams { float* y; const float* x; float a; int n; };
template <int kBlock>
__global__ void __launch_bounds__(kBlock) saxpy(KJIT_PARAMS SaxpyParams p) {
  const int i = blockIdx.x * kBlock + threadIdx.x;
  if (i < p.n) p.y[i] += p.a * p.x[i];
}
"""


def saxpy(**kw):
    return kjit.Program(SAXPY, ["saxpy<256>", "saxpy<128>"], family="test.saxpy", **kw)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_compile_cubin(target, cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    c = saxpy().compile(target, runtime=rt)
    assert c.target == target
    assert not c.is_ptx
    assert c.binary[:4] == b"\x7fELF"
    assert [k.name_expression for k in c.kernels] == ["saxpy<256>", "saxpy<128>"]
    for k in c.kernels:
        assert 0 < k.registers < 255
        assert k.spill_bytes == 0
        assert k.static_smem == 0
        assert k.lowered_name.startswith("_Z")
    assert f"-arch={target}" in c.options
    assert c.nvrtc_version == rt.nvrtc_version
    assert c.family == "test.saxpy"


def test_compile_ptx(cache_dir):
    c = saxpy().compile("compute_90", runtime=kjit.Runtime(cache_dir=cache_dir))
    assert c.is_ptx
    ptx = c.binary.decode()
    assert ".target sm_90" in ptx
    for k in c.kernels:
        assert f".entry {k.lowered_name}" in ptx


def test_key_matches_compile_and_options_change_it(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    key = saxpy().key("sm_90a", runtime=rt)
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert saxpy().compile("sm_90a", runtime=rt).key == key
    assert saxpy(options=["-DUNUSED=1"]).key("sm_90a", runtime=rt) != key
    assert saxpy().key("sm_80", runtime=rt) != key
    assert rt.stats()["compiles"] == 1


def test_second_runtime_hits_the_disk_cache(cache_dir):
    first = kjit.Runtime(cache_dir=cache_dir)
    a = saxpy().compile("sm_90a", runtime=first)
    assert a.origin == "compiled"
    assert first.stats()["compiles"] == 1
    assert saxpy().compile("sm_90a", runtime=first).origin == "compiled"  # the same object again
    assert first.stats()["memory_hits"] == 1

    second = kjit.Runtime(cache_dir=cache_dir)
    b = saxpy().compile("sm_90a", runtime=second)
    assert b.origin == "disk"
    s = second.stats()
    assert (s["disk_hits"], s["compiles"], s["misses"]) == (1, 0, 0)
    assert b.binary == a.binary and b.key == a.key
    assert [k.registers for k in b.kernels] == [k.registers for k in a.kernels]


def test_memory_only_runtime_writes_nothing(tmp_path):
    rt = kjit.Runtime(cache_dir=str(tmp_path / "c"), disk_cache=False)
    saxpy().compile("sm_80", runtime=rt)
    assert not rt.disk_cache_enabled
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.kjit*"))


def test_headers_and_defines(cache_dir):
    src = '#include "scale.h"\n__global__ void k(float* p) { p[0] = SCALE * FACTOR; }\n'
    prog = kjit.Program(src, ["k"], headers={"scale.h": "#define SCALE 2.0f\n"}, options=["-DFACTOR=3.0f"])
    c = prog.compile("sm_80", runtime=kjit.Runtime(cache_dir=cache_dir))
    assert c.kernels[0].registers > 0


def test_compile_error_carries_the_nvrtc_log(cache_dir):
    prog = kjit.Program("__global__ void k() { this_is_not_declared(); }\n", ["k"], source_name="broken.cu")
    with pytest.raises(kjit.CompileError) as e:
        prog.compile("sm_80", runtime=kjit.Runtime(cache_dir=cache_dir))
    assert "broken.cu" in str(e.value)
    assert "this_is_not_declared" in e.value.log
    assert "broken.cu(1)" in e.value.log
    assert "-arch=sm_80" in e.value.options
    assert isinstance(e.value, kjit.Error) and isinstance(e.value, RuntimeError)


def test_invalid_target_and_arch_option(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    with pytest.raises(kjit.InvalidArgument, match="sm_9x"):
        saxpy().compile("sm_9x", runtime=rt)
    with pytest.raises(kjit.InvalidArgument, match="arch"):
        saxpy(options=["-arch=sm_80"]).compile("sm_80", runtime=rt)
    with pytest.raises(kjit.InvalidArgument):
        kjit.Program(SAXPY, []).compile("sm_80", runtime=rt)
    # A target that is no str: a TypeError naming the method, not the extension's signature.
    for method in ("compile", "key"):
        with pytest.raises(TypeError, match=f"Program.{method}: target must be a str") as e:
            getattr(saxpy(), method)(None, runtime=rt)
        assert "_compile" not in str(e.value) and "_key" not in str(e.value)


def test_shipped_kernel_source_by_name(cache_dir):
    # source=None reads source_name from kjit's embedded kernel sources.
    with pytest.raises(kjit.InvalidArgument, match="no_such_file"):
        kjit.Program(None, ["k"], source_name="no_such_file.cu").compile("sm_80", runtime=kjit.Runtime(cache_dir=cache_dir))


def test_global_runtime_stats_are_counters():
    s = kjit.stats()
    assert {"memory_hits", "disk_hits", "misses", "compiles", "loads"} <= set(s)


@pytest.mark.skipif(kjit.device_count() > 0, reason="checks the no-driver path")
def test_load_without_a_driver_is_a_driver_error(cache_dir):
    with pytest.raises(kjit.DriverError) as e:
        saxpy().load(runtime=kjit.Runtime(cache_dir=cache_dir))
    assert "driver" in str(e.value)
    assert not kjit.driver_available()
    assert kjit.driver_unavailable_reason()


def test_python_m_kjit_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "kjit", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"kjit {kjit.__version__}"
    out = subprocess.run([sys.executable, "-m", "kjit", "kernels", "--json"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "rotary" in out.stdout


def test_import_needs_no_gpu():
    code = "import kjit, sys; print(kjit.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert out.returncode == 0, out.stderr


STD_SOURCE = r"""
#include <cstdint>
#include <cmath>
#include <algorithm>
__global__ void scale(float* y, const float* x, std::int32_t n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = std::min(std::sqrt(std::fabs(x[i])), 1.0f);
}
"""


def test_standard_headers_are_on_by_default_and_off_on_request(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    on = kjit.Program(STD_SOURCE, ["scale"], family="test.std")
    assert on.std_headers is True
    compiled = on.compile("sm_90a", runtime=rt)
    assert compiled.kernels[0].name_expression == "scale"
    off = kjit.Program(STD_SOURCE, ["scale"], family="test.std", std_headers=False)
    assert off.key("sm_90a", runtime=rt) != compiled.key
    with pytest.raises(kjit.CompileError, match='cannot open source file "cstdint"'):
        off.compile("sm_90a", runtime=rt)
    # A program that includes no standard header compiles the same either way: one key.
    plain = "__global__ void k(float* y) { y[0] = 1.0f; }\n"
    assert (kjit.Program(plain, ["k"]).key("sm_90a", runtime=rt) ==
            kjit.Program(plain, ["k"], std_headers=False).key("sm_90a", runtime=rt))


def test_host_only_call_names_its_header(cache_dir):
    prog = kjit.Program('#include <cstdio>\n__global__ void k() { fprintf(stderr, "x"); }\n', ["k"],
                        family="test.std")
    with pytest.raises(kjit.CompileError, match=r"kjit: <cstdio>: fprintf is host-only"):
        prog.compile("sm_90a", runtime=kjit.Runtime(cache_dir=cache_dir))
