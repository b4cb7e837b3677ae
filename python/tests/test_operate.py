"""Operating kjit from Python, without a GPU: freeze after warm-up, event listeners, stats and the
Prometheus text. Each test uses a private Runtime on its own cache folder."""
import re
import threading

import pytest

import kjit

SOURCE = "template <int N> __global__ void fill(float* out) { out[threadIdx.x] = N; }\n"


def fill(n):
    return kjit.Program(SOURCE, [f"fill<{n}>"], family="pytest.fill", template_args=f"value={n}")


def test_freeze_off_refuses_a_new_miss_and_keeps_what_warm_up_compiled(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    warm = fill(1).compile("sm_90a", runtime=rt)
    assert kjit.jit_mode(runtime=rt) == "on"
    kjit.freeze("off", runtime=rt)
    assert kjit.jit_mode(runtime=rt) == "off"
    assert fill(1).compile("sm_90a", runtime=rt).key == warm.key
    with pytest.raises(kjit.JitDisabled) as e:
        fill(2).compile("sm_90a", runtime=rt)
    assert isinstance(e.value, kjit.Error)
    assert (e.value.family, e.value.params, e.value.target) == ("pytest.fill", "value=2", "sm_90a")
    assert e.value.command == ""  # an application's own kernel: no command rebuilds it
    assert "Runtime::freeze(off)" in str(e.value)
    # A disk hit is still served: another runtime put it there.
    fill(3).compile("sm_90a", runtime=kjit.Runtime(cache_dir=cache_dir))
    assert fill(3).compile("sm_90a", runtime=rt).origin == "disk"
    s = kjit.stats(runtime=rt)
    assert (s["compiles"], s["refused"], s["frozen"], s["jit_mode"]) == (1, 1, True, "off")
    kjit.unfreeze(runtime=rt)
    assert fill(2).compile("sm_90a", runtime=rt).origin == "compiled"
    with pytest.raises(ValueError, match='the mode is one of "warn", "async", "off"'):
        kjit.freeze("on", runtime=rt)


def test_async_is_a_mode_between_warn_and_off(cache_dir, capfd):
    rt = kjit.Runtime(cache_dir=cache_dir)
    kjit.freeze("async", runtime=rt)
    assert kjit.jit_mode(runtime=rt) == "async"
    # A program compiled by name has no fallback: it compiles on the calling thread, warned once.
    assert fill(8).compile("sm_90a", runtime=rt).origin == "compiled"
    assert "Runtime::freeze(async)" in capfd.readouterr().err
    s = kjit.stats(runtime=rt)
    assert (s["jit_mode"], s["fallback_launches"], s["background_compiles"], s["no_fallback"]) == ("async", 0, 0, 0)
    assert 'kjit_jit_mode{mode="async"} 1' in kjit.metrics_text(runtime=rt)
    kjit.freeze("off", runtime=rt)
    assert kjit.jit_mode(runtime=rt) == "off"
    assert kjit.jit_mode(runtime=kjit.Runtime(cache_dir=cache_dir, jit="async")) == "async"


def test_freeze_warn_compiles_and_warns(cache_dir, capfd):
    rt = kjit.Runtime(cache_dir=cache_dir)
    kjit.freeze("warn", runtime=rt)
    fill(4).compile("sm_90a", runtime=rt)
    fill(4).compile("sm_90a", runtime=rt)
    err = capfd.readouterr().err
    assert err.count("Runtime::freeze(warn)") == 1, err
    assert kjit.stats(runtime=rt)["compiles"] == 1


def test_listeners_hear_compile_disk_hit_and_refused(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    seen = []
    lid = kjit.add_listener(seen.append, runtime=rt)
    compiled = fill(5).compile("sm_90a", runtime=rt)
    assert [e["kind"] for e in seen] == ["compile"]
    e = seen[0]
    assert (e["key"], e["family"], e["params"], e["target"], e["device"]) == (
        compiled.key, "pytest.fill", "value=5", "sm_90a", -1)
    assert e["ms"] > 0
    other = kjit.Runtime(cache_dir=cache_dir)
    kjit.add_listener(seen.append, runtime=other)
    fill(5).compile("sm_90a", runtime=other)
    assert seen[-1]["kind"] == "disk_hit"
    kjit.freeze("off", runtime=rt)
    with pytest.raises(kjit.JitDisabled):
        fill(6).compile("sm_90a", runtime=rt)
    assert seen[-1]["kind"] == "refused" and "value=6" == seen[-1]["params"]
    assert kjit.remove_listener(lid, runtime=rt)
    assert not kjit.remove_listener(lid, runtime=rt)


def test_a_raising_listener_never_breaks_the_compile(cache_dir, capfd):
    rt = kjit.Runtime(cache_dir=cache_dir)

    def broken(event):
        raise RuntimeError("listener bug")

    kjit.add_listener(broken, runtime=rt)
    fill(7).compile("sm_90a", runtime=rt)
    fill(8).compile("sm_90a", runtime=rt)
    err = capfd.readouterr().err
    assert err.count("listener bug") == 1, err


def test_listeners_from_threads_that_released_the_gil(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    seen = []
    kjit.add_listener(lambda e: seen.append(e["params"]), runtime=rt)
    threads = [threading.Thread(target=lambda n=n: fill(n).compile("sm_90a", runtime=rt)) for n in (10, 11, 12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == ["value=10", "value=11", "value=12"]


def test_metrics_text_is_prometheus_and_moves(cache_dir):
    rt = kjit.Runtime(cache_dir=cache_dir)
    fill(9).compile("sm_90a", runtime=rt)
    text = kjit.metrics_text(runtime=rt)
    families = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    names = [name for name, _ in families]
    assert len(names) == len(set(names))
    assert ("kjit_compiles_total", "counter") in families
    assert ("kjit_compile_seconds", "summary") in families
    samples = dict(re.findall(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M))
    assert float(samples["kjit_compiles_total"]) == 1
    assert float(samples["kjit_compile_seconds_sum"]) > 0
    assert float(samples["kjit_cache_entries"]) == 1
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or re.match(r"^kjit_\S+ \S+$", line), line
    s = kjit.stats(runtime=rt)
    assert s["cache_entries"] == 1 and s["cache_bytes"] > 0
    assert {"memory_hits", "disk_hits", "misses", "compiles", "loads", "refused"} <= set(kjit.stats())
