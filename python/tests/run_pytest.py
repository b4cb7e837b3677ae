"""CTest's entry to the Python tests: runs pytest on python/tests against the installed kjit.
Exits 77 (CTest: skipped) when kjit or pytest is not installed, except under CI=true, where
that is a failure: tools/setup.sh installs both."""
import os
import sys

try:
    import pytest  # noqa: F401
    import kjit  # noqa: F401
except ImportError as e:
    print(f"python tests: {e}: run tools/setup.sh (pip install . and pytest numpy) first")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

sys.exit(pytest.main(sys.argv[1:]))
