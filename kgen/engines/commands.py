"""`kgen audit` and `kgen patch` command bodies: load the specs, open the engine tree, walk the
adapter's sites, print diagnostics like kgen's own (or one JSON object), return the exit code.

Exit codes: 0 the engine agrees / the patch is written (or there is nothing to do); 1 a mismatch,
an invalid spec or engine drift (an anchor found zero or two times); 2 usage: unknown engine, a root
that is not that engine's checkout, a missing spec file.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from ..diagnostics import KgenError, Problem, err, failure_json, print_json, print_problems, report_each
from ..files import check_target, locked, recover, write_atomic
from ..files import write_all as write_files
from ..layout import compute
from ..validate import validate_paths
from .diff import unified_diff
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


def pr_summary(adapter: Adapter, spec, lay, tree: EngineTree, changed: dict[str, str | None]) -> str:
    """A short summary a maintainer can paste as the PR body."""
    from .installed import site_summaries

    lines = [f"PR summary: wire kgen's {spec.name} ({lay.bytes_per_token} B/token, {lay.page_bytes} B pages) "
             f"into {adapter.name}'s DeepSeek-V4 indexer behind {adapter.option} (off by default; with it "
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
                code = max(code, e.exit_code)  # an unreadable engine file is 2, as for patch
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
        check_outputs(root, out, apply)  # before any work: a bad -o never follows a written tree
        adapter = _adapter(engine, root)
        with _engine_lock(root) if apply else contextlib.nullcontext():
            variants = _variants(path)
            if len(variants) != 1:
                raise KgenError([Problem("engine-patch", f"{path} holds {len(variants)} variants; kgen patch wires "
                                         "one", file=path, fix="pass the spec file of the variant")])
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
# the outputs, the lock and the all-or-nothing write (kgen.files; the diff text: kgen.engines.diff)


def check_outputs(root: Path, out: Path | None, apply: bool) -> None:
    """`-o` must be a file kgen may write, outside the engine tree (the diff would overwrite the code
    it patches); checked before anything is read or written."""

    if out is None:
        return
    if os.path.realpath(out) == os.path.realpath(root) or \
            os.path.realpath(out).startswith(os.path.realpath(root).rstrip(os.sep) + os.sep):
        raise KgenError([Problem("engine-output", f"-o {out} lies inside the engine root {root}: the diff would "
                                 "overwrite the tree it patches", file=out,
                                 fix="write the diff outside --root")], exit_code=2)
    try:
        check_target(out)
    except OSError as e:
        raise KgenError([Problem("engine-output", f"cannot write the diff to {out}: {e.strerror or e}", file=out,
                                 fix="-o names a regular file (or a new one)")], exit_code=2) from None
    if not Path(out).parent.is_dir() and not Path(out).is_symlink():
        raise KgenError([Problem("engine-output", f"cannot write the diff to {out}: its directory does not exist",
                                 file=out, fix="create the directory or choose another -o")], exit_code=2)


@contextlib.contextmanager
def _engine_lock(root: Path):
    """One `--apply` at a time per engine tree, from reading it to the last write (two at once would
    mix their variants); an earlier `--apply` that was killed is finished or undone first."""

    try:
        with locked(root):
            recover(root)
            yield
    except OSError as e:
        raise KgenError([Problem("engine-write", f"cannot patch {root}: {e.strerror or e}", file=root,
                                 fix="wait for the other kgen patch --apply, or remove the journal it names")]) \
            from None


def write_all(tree: EngineTree, files: dict[str, str | None]) -> None:
    """Write every file or none (kgen.files.write_all, confined to the root: no write through a
    directory link, no link out of the tree, no special or read-only file replaced)."""
    try:
        write_files({tree.disk_path(rel): text for rel, text in files.items()}, root=tree.root)
    except OSError as e:
        where = Path(e.filename) if e.filename else tree.root
        raise KgenError([Problem("engine-write", f"cannot write the patch: {where} {e.strerror or e}; nothing was "
                                 "changed", file=where)]) from None


def _write_atomic(target: Path, text: str) -> None:

    try:
        write_atomic(target, text)
    except OSError as e:
        raise KgenError([Problem("engine-write", f"cannot write {target} ({e.strerror or e})", file=target)],
                        exit_code=2) from None
