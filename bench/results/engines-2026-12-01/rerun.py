"""Rerun every audit and patch of this table against the release trees and rewrite results.json.

From the repository root, after `make releases`:
    PYTHONPATH=. python bench/results/engines-2026-12-01/rerun.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent / "results.json"
MANIFEST = ROOT / "tests" / "fixtures" / "engines" / "releases.json"
SPECS = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("specs/*.yaml"), *ROOT.glob("specs/dsv4/*.yaml"),
                                                    *ROOT.glob("specs/sglang/*.yaml")])
FIXTURES = ["tests/fixtures/engines/vllm_indexer_fp4.yaml", "tests/fixtures/engines/vllm_indexer_fp8.yaml"]
PATCH = {"sglang": "specs/sglang/indexer_bf16_plan.yaml", "vllm": "specs/vllm_indexer_bf16.yaml"}


def kgen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgen", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=600)


def audit_row(engine: str, tree: str, spec: str) -> dict:
    command = f"kgen audit --engine {engine} --root {tree} {spec}"
    r = kgen(*command.split()[1:], "--json")
    variants = [{"variant": v["variant"], "ok": v["ok"], "skipped": bool(v.get("skipped")),
                 "rules": sorted({e["rule"] for e in v["errors"]}), "errors": len(v["errors"])}
                for v in json.loads(r.stdout)["results"]]
    return {"command": command, "exit": r.returncode, "variants": variants}


def patch_row(engine: str, tree: str) -> dict:
    command = f"kgen patch --engine {engine} --root {tree} {PATCH[engine]}"
    r = kgen(*command.split()[1:], "--json")
    d = json.loads(r.stdout)
    if r.returncode != 0:
        return {"command": command + " --json", "exit": r.returncode, "message": d["errors"][0]["message"][:200]}
    lines = d["diff"].splitlines()
    return {"command": command + " --json", "exit": 0, "files": d["files"],
            "added_lines": sum(ln.startswith("+") and not ln.startswith("+++") for ln in lines),
            "removed_lines": sum(ln.startswith("-") and not ln.startswith("---") for ln in lines)}


def main() -> int:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    releases = []
    for rel in json.loads(MANIFEST.read_text(encoding="utf-8"))["releases"]:
        tree = f".releases/trees/{rel['name']}"
        releases.append({"release": rel["name"], "wheel": rel["wheel"], "sha256": rel["sha256"],
                         "audit": [audit_row(rel["engine"], tree, s) for s in SPECS + FIXTURES],
                         "patch": patch_row(rel["engine"], tree)})
        print(f"{rel['name']}: done", flush=True)
    OUT.write_text(json.dumps({"date": "2026-12-01", "kgen_commit": commit, "releases": releases}, indent=1) + "\n",
                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
