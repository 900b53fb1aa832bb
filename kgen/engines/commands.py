"""`kgen audit` and `kgen patch` command bodies: load the specs, open the engine tree, walk the
adapter's sites, print diagnostics like kgen's own (or one JSON object), return the exit code.

Exit codes: 0 the engine agrees / the patch is written (or there is nothing to do); 1 a mismatch,
an invalid spec or engine drift (an anchor found zero or two times); 2 usage: unknown engine, a root
that is not that engine's checkout, a missing spec file.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

from ..diagnostics import KgenError, Problem, err, failure_json, print_json, print_problems, report_each
from ..layout import compute
from .sites import Adapter, run_audit, run_patch
from .tree import EngineTree


def open_tree(root: Path, adapter: Adapter) -> EngineTree:
    """The engine tree at `root`: a repository checkout, or the installed package directory
    (`.../site-packages/sglang`, `.../site-packages/vllm`), read in the checkout's layout."""
    from .installed import PackageTree, package_prefix

    prefix = package_prefix(root, adapter)
    return EngineTree(root) if prefix is None else PackageTree(root, prefix)


def default_root(engine: str) -> Path:
    """The importable engine package (for `--engine NAME` without `--root`)."""
    import importlib.util

    spec = importlib.util.find_spec(engine)
    if spec is None or not spec.submodule_search_locations:
        raise KgenError([Problem("engine-root", f"no --root and no importable {engine} package in this Python",
                                 fix=f"pass --root, or install {engine}")], exit_code=2)
    return Path(list(spec.submodule_search_locations)[0])


def pr_summary(adapter: Adapter, spec, lay, tree: EngineTree, changed: dict[str, str]) -> str:
    """A short summary a maintainer can paste as the PR body."""
    from .installed import site_summaries

    lines = [f"PR summary: wire kgen's {spec.name} ({lay.bytes_per_token} B/token, {lay.page_bytes} B pages) "
             f"into {adapter.name}'s DeepSeek-V4 indexer behind --enable-kgen-indexer (off by default; with it "
             "off no edited function computes anything new)."]
    lines += [f"  - {line}" for line in site_summaries(adapter, tree, changed)]
    return "\n".join(lines)


def _adapter(engine: str, root: Path) -> Adapter:
    from . import adapters

    table = adapters()
    if engine not in table:
        raise KgenError([Problem("engine", f"unknown engine '{engine}' (known: {', '.join(sorted(table))})",
                                 fix="pass --engine " + " or --engine ".join(sorted(table)))], exit_code=2)
    adapter = table[engine]
    if not root.is_dir():
        raise KgenError([Problem("engine-root", f"{root} is not a directory", file=root)], exit_code=2)
    from .installed import package_prefix

    if not adapter.is_checkout(root) and package_prefix(root, adapter) is None:
        raise KgenError([Problem("engine-root", f"{root} is not a {engine} checkout (it has no "
                                 f"{', '.join(adapter.markers)})", file=root,
                                 fix=f"pass the repository root of {engine} as --root")], exit_code=2)
    return adapter


def _variants(path: Path):
    """(spec, layout) of every variant of a path; KgenError with the validator's errors if invalid."""
    from ..validate import validate_paths

    return [(c.spec, c.layout if c.layout is not None else compute(c.spec)) for c in validate_paths([path]).checked()]


def audit_command(engine: str, root: Path | None, paths: list[Path], as_json: bool) -> int:
    try:
        root = default_root(engine) if root is None else root
        adapter = _adapter(engine, root)
    except KgenError as e:
        return _fail(e, as_json)

    def one(path: Path) -> tuple[int, list[dict]]:
        code, rows = 0, []
        for spec, lay in _variants(path):
            if spec.head_dim != adapter.key_head_dim:  # a latent (non-indexer) variant of a family
                why = (f"not an indexer-key variant (head_dim {spec.head_dim}; the {engine} sites describe the "
                       f"{adapter.key_head_dim}-wide indexer cache): skipped")
                rows.append({"path": str(path), "variant": spec.name, "ok": True, "skipped": why, "errors": []})
                if not as_json:
                    print(f"{path}: note: {spec.name} is {why}")
                continue
            tree = open_tree(root, adapter)
            try:
                problems = run_audit(tree, adapter, spec, lay, path)
            except KgenError as e:
                problems = e.problems
            code = max(code, 1 if problems else 0)
            rows.append({"path": str(path), "variant": spec.name, "ok": not problems,
                         "bytes_per_token": lay.bytes_per_token, "page_bytes": lay.page_bytes,
                         "errors": [p.to_json() for p in problems]})
            if not as_json:
                print_problems(problems)
                state = "agrees" if not problems else f"{len(problems)} mismatch(es)"
                print(f"{path}: {engine} at {root} vs {spec.name} ({lay.bytes_per_token} B/token, "
                      f"{lay.page_bytes} B/page): {state}")
        return code, rows

    def failed(path: Path, problems: list[Problem]) -> dict:
        return {"path": str(path), "variant": None, "ok": False, "errors": [p.to_json() for p in problems]}

    code, results = report_each(paths, one, failed, as_json)
    if as_json:
        print(json.dumps({"engine": engine, "root": str(root), "results": results}, indent=2))
    return code


def patch_command(engine: str, root: Path | None, path: Path, out: Path | None, apply: bool,
                  as_json: bool) -> int:
    try:
        root = default_root(engine) if root is None else root
        adapter = _adapter(engine, root)
        variants = _variants(path)
        if len(variants) != 1:
            raise KgenError([Problem("engine-patch", f"{path} holds {len(variants)} variants; kgen patch wires one",
                                     file=path, fix="pass the spec file of the variant")])
        spec, lay = variants[0]
        tree = open_tree(root, adapter)
        run_patch(tree, adapter, spec, lay, path)
        warnings = plan_warnings(adapter, spec, path)
        changed = tree.changed()
        diff = unified_diff(tree, changed)
        if apply:
            write_all(tree, changed)
        if out is not None:
            _write_atomic(out, diff)
    except KgenError as e:
        return _fail(e, as_json)
    if as_json:
        print(json.dumps({"engine": engine, "root": str(root), "variant": spec.name, "files": sorted(changed),
                          "applied": apply and bool(changed), "diff": diff, "errors": [],
                          "warnings": [w.to_json() for w in warnings]}, indent=2))
    elif out is None:
        sys.stdout.write(diff)
    if not as_json:
        print_problems(warnings)
        if changed:
            err(pr_summary(adapter, spec, lay, tree, changed))
        verb = "applied to" if apply else "for"
        err(f"kgen patch: {len(changed)} file(s) {verb} {root} ({spec.name})" if changed
             else f"kgen patch: {root} already carries {spec.name}; nothing to do")
    return 0


def plan_warnings(adapter: Adapter, spec, path: Path) -> list[Problem]:
    """SGLang's store hands the kernel its 16-byte DecodePlan, not positions: a spec that does not
    read the plan gets the plan where it expects positions, and kgen's op refuses the call."""
    from .sites import takes_decode_plan

    if adapter.name != "sglang" or takes_decode_plan(spec):
        return []
    return [Problem("engine-store-plan", f"{spec.name} reads token positions, but SGLang's store passes its "
                    "DecodePlan (position = seq_len - 4, written where seq_len % 4 == 0): kgen's op will refuse "
                    "the plan tensor until the spec reads it", severity="warning", file=path,
                    fix="set `positions: {source: decode_plan, compress_ratio: 4}` in the spec (as specs/sglang/"
                    "indexer_bf16_plan.yaml does), then run kgen patch again")]


def _fail(e: KgenError, as_json: bool) -> int:
    if as_json:
        print_json(failure_json(e.problems, results=[]))
    else:
        print_problems(e.problems)
    return e.exit_code


# ---------------------------------------------------------------------------------------------
# the diff and the all-or-nothing write


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def unified_diff(tree: EngineTree, changed: dict[str, str]) -> str:
    """A git-appliable unified diff (a/ b/ prefixes) of every changed or new file."""
    out = []
    for rel, new in changed.items():
        old = tree.original(rel)
        header = f"diff --git a/{rel} b/{rel}\n"
        if old is None:
            header += "new file mode 100644\n"
        body = difflib.unified_diff(_lines(old or ""), _lines(new), fromfile="/dev/null" if old is None else f"a/{rel}",
                                    tofile=f"b/{rel}")
        text = "".join(body)
        if text:
            out.append(header + text)
    return "".join(out)


def write_all(tree: EngineTree | Path, files: dict[str, str]) -> None:
    """Write every file or none: all are staged as temp files beside their targets first, then
    renamed into place; a failure before the last rename restores what was replaced."""
    from ..files import write_all as write_files
    from .installed import disk_path

    tree = tree if isinstance(tree, EngineTree) else EngineTree(tree)
    try:
        write_files({disk_path(tree, rel): text for rel, text in files.items()})
    except OSError as e:
        raise KgenError([Problem("engine-write", f"writing the patch failed ({e}); nothing was changed",
                                 file=tree.root)]) from None


def _write_atomic(target: Path, text: str) -> None:
    from ..files import write_atomic

    try:
        write_atomic(target, text)
    except OSError as e:
        raise KgenError([Problem("engine-write", f"cannot write {target} ({e})", file=target)], exit_code=2) from None
