"""topk_run.py under another top-k plan, in its own process: TOPK_AB=threads:N renders the kernel with N threads
per CTA (TOPK_THREADS; a cubin of its own, the grid follows)."""

from __future__ import annotations

import os
import runpy
import sys

import kgen.topk_plan as TP

which = os.environ.get("TOPK_AB", "")
if which.startswith("threads:"):
    TP.TOPK_THREADS = int(which.split(":")[1])
else:
    sys.exit(f"TOPK_AB={which!r}: threads:N")
runpy.run_path(os.path.join(os.path.dirname(__file__), "topk_run.py"), run_name="__main__")
