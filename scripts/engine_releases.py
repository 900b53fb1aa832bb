"""Lay out the released engines kgen's engine tests run against, from the package registry.

    python scripts/engine_releases.py            # make releases: download once, unpack, idempotent
    python scripts/engine_releases.py --check    # exit 1 unless every tree is there and complete
    python scripts/engine_releases.py --trace    # recompute each tree's import closure (needs torch)

The releases and the files kept from each are in tests/fixtures/engines/releases.json: the wheel
(name and sha256, fetched with `pip download --no-deps` for its own platform tags, so any host gets
the same bytes), the layout prefix kgen expects (`python/` for SGLang's repository layout, none for
vLLM), the files kgen's sites read, and for a release the engine-in-the-loop test imports, the
closure of those imports (`--trace` records it with tests/engine_harness.py).

Everything lives under `.releases/` in the repository root (git-ignored; KGEN_RELEASES_DIR moves
it): `wheels/` is the download cache (a wheel whose sha256 matches is never fetched again; it also
holds the manifest's peer_wheels, fetched the same way and never unpacked: what the in-process peers'
kits are made from), and
`trees/<name>/` the unpacked trees, each finished by a stamp naming the manifest entry it was built
from (a second run with an unchanged manifest touches nothing). Only `trees/` (a few MiB) is needed
to run the tests: it is what travels to a machine without network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "fixtures" / "engines" / "releases.json"
STAMP = ".kgen-release"


def releases_dir() -> Path:
    return Path(os.environ.get("KGEN_RELEASES_DIR") or ROOT / ".releases")


def load_manifest() -> list[dict]:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))["releases"]


def load_peer_wheels() -> list[dict]:
    """Wheels cached beside the releases and never unpacked (the manifest's peer_wheels)."""
    return json.loads(MANIFEST.read_text(encoding="utf-8")).get("peer_wheels", [])


def entry_digest(rel: dict) -> str:
    return hashlib.sha256(json.dumps(rel, sort_keys=True).encode()).hexdigest()


def tree_dir(rel: dict) -> Path:
    return releases_dir() / "trees" / rel["name"]


def tree_ready(rel: dict) -> bool:
    stamp = tree_dir(rel) / STAMP
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == entry_digest(rel)


def sha256_file(path: Path) -> str:
    """The file's sha256, read 1 MiB at a time (the releases' wheels and the peers' kit records)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel(rel: dict) -> Path:
    """The release's wheel in the cache, downloaded once (its sha256 checked either way)."""
    cache = releases_dir() / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / rel["wheel"]
    if path.is_file() and sha256_file(path) == rel["sha256"]:
        return path
    # the wheel's own tags, so that pip picks the same file whatever this host's Python is; a stable-ABI
    # wheel (cp38-abi3) runs on every later CPython, and its Requires-Python (vLLM: >=3.11) decides:
    # ask as this interpreter (kgen itself requires 3.11 or newer)
    _name, _version, python, abi, platforms = rel["wheel"][: -len(".whl")].split("-")
    platform = platforms.split(".")[0]  # a wheel of several platform tags matches any one of them
    tagged = (int(python[2]), int(python[3:]))
    if abi == "abi3":  # the tag is the oldest CPython it runs on
        major, minor = max(tagged, sys.version_info[:2])
    else:
        major, minor = tagged
    version = f"{major}.{minor}"
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", version, "--implementation", python[:2], "--abi", abi,
               "--platform", platform, "-d", tmp, rel["requirement"]]
        print(f"releases: downloading {rel['requirement']} ({rel['wheel']})", flush=True)
        subprocess.run(cmd, check=True)
        got = Path(tmp) / rel["wheel"]
        if not got.is_file():
            raise SystemExit(f"releases: pip did not fetch {rel['wheel']} (got {os.listdir(tmp)})")
        digest = sha256_file(got)
        if digest != rel["sha256"]:
            raise SystemExit(f"releases: {rel['wheel']} has sha256 {digest}, the manifest says {rel['sha256']}")
        os.replace(got, path)
    return path


def unpack(rel: dict) -> Path:
    """The release's tree: the listed files of its wheel under the layout prefix. Built beside
    its final place and renamed into it, so a tree is either whole (stamped) or absent."""
    dest = tree_dir(rel)
    if tree_ready(rel):
        return dest
    whl = wheel(rel)
    files = sorted(set(rel["files"]) | set(rel.get("imports_closure", [])))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{rel['name']}.", dir=dest.parent))
    try:
        with zipfile.ZipFile(whl) as z:
            names = set(z.namelist())
            missing = [f for f in files if f not in names]
            if missing:
                raise SystemExit(f"releases: {rel['wheel']} has no {', '.join(missing[:5])}")
            for name in files:
                target = tmp / rel["prefix"] / name
                if name.endswith("/"):  # a directory the engine looks for (SGLang's JIT include root)
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
        (tmp / STAMP).write_text(entry_digest(rel) + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"releases: {rel['name']}: {len(files)} files, {size / 2**20:.1f} MiB in {dest}", flush=True)
    return dest


TRACE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
import engine_harness
root, package = sys.argv[2], sys.argv[3]
engine_harness.install(root, package, *engine_harness.STAND_INS[package])
for name in sys.argv[4:]:
    importlib.import_module(name)
print(json.dumps(engine_harness.loaded_files(root)))
"""


def trace(rel: dict) -> list[str]:
    """The files of the wheel that importing the release's `imports` reads (the harness's
    stand-ins in place), found by unpacking the whole wheel into a scratch directory."""
    whl = wheel(rel)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(whl) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith(rel["package"] + "/")])
        r = subprocess.run([sys.executable, "-c", TRACE, str(ROOT / "tests"), tmp, rel["package"], *rel["imports"]],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"releases: importing {rel['name']}'s modules failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that every tree is complete")
    ap.add_argument("--trace", action="store_true", help="recompute the import closures into the manifest")
    args = ap.parse_args(argv)
    rels = load_manifest()
    if args.check:
        missing = [r["name"] for r in rels if not tree_ready(r)]
        if missing:
            print(f"releases: not laid out: {', '.join(missing)} (run make releases)", file=sys.stderr)
            return 1
        return 0
    if args.trace:
        data = json.loads(MANIFEST.read_text(encoding="utf-8"))
        for rel in data["releases"]:
            if rel.get("imports"):
                rel["imports_closure"] = [f for f in trace(rel) if f not in rel["files"]]
                print(f"releases: {rel['name']}: {len(rel['imports_closure'])} files imported", flush=True)
        MANIFEST.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        rels = data["releases"]
    for rel in rels:
        unpack(rel)
    for rel in load_peer_wheels():
        wheel(rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
