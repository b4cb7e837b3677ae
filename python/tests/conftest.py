import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def _has_gpu():
    try:
        import kjit
        return kjit.device_count() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")
