"""`python -m kgen`: the `kgen` command line (the console script's entry point, `kgen.cli:main`)."""

from __future__ import annotations

from kgen.cli import main

if __name__ == "__main__":
    main()
