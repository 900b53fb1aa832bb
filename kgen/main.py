"""The `kgen` console script: validate/layout take the fast path (no CLI framework), everything
else goes through the typer app in `kgen.cli`."""

from __future__ import annotations

import sys


def main() -> None:
    from .commands import fast_path

    code = fast_path(sys.argv[1:])
    if code is not None:
        sys.stdout.flush()
        sys.exit(code)
    from .cli import run_app

    run_app()


if __name__ == "__main__":
    main()
