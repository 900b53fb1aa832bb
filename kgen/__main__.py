"""`python -m kgen`: the `kgen` command line (the console script's entry point)."""

from __future__ import annotations

try:
    from kgen.main import main
except ImportError:  # the CLI's entry point lives in kgen.cli
    from kgen.cli import main

if __name__ == "__main__":
    main()
