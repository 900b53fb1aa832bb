"""call3.sh's and call4.sh's top-k launches for ncu: session 8's profile_stalls.py as it is (1 x 4K on one CTA,
1 x 64K on a cluster of 8, 32 x 64K on clusters of 4, k = 512, fp8 reader logits)."""

import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "h200-2026-12-03-s8", "profile_stalls.py"),
               run_name="__main__")
