"""`python -m kjit ...` (and the `kjit` console script): runs the kjit CLI bundled in the package
(kjit/bin/kjit, the same program tools/setup.sh builds as build/tools/kjit)."""
import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kjit")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"kjit: error: the CLI is not installed with this package ({exe})\n")
        sys.exit(2)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
