"""Families: the dispatch key, the rules that make a dispatch complete and unambiguous.

`variant_key` is used by the family rules and by the rendered `select_kernel` tables alike, so the
table can never serve a key the validator did not check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from .diagnostics import Problem, shown
from .document import Variant
from .rules import check_name
from .spec import Family, Spec


def key_field_ok(path: str) -> bool:
    """Is `path` (e.g. "store.dtype") a scalar field of the spec model?"""
    model: type[BaseModel] | None = Spec
    parts = path.split(".")
    for i, part in enumerate(parts):
        if model is None or part not in model.model_fields:
            return False
        ann = model.model_fields[part].annotation
        nested = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if nested is None:
            # Host | None and the like: take the model member of the union
            for arg in getattr(ann, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    nested = arg
        is_last = i == len(parts) - 1
        if is_last:
            return nested is None and part not in ("targets",)
        model = nested
    return False


def field_value(spec: Spec, path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        node = getattr(node, part, None) if node is not None else None
    return node


def variant_key(spec: Spec, key: list[str]) -> tuple:
    return tuple(field_value(spec, f) for f in key)


def format_key(key: list[str], values: tuple) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in zip(key, values)) + "}"


def check_family_guards(family: Family) -> Iterator[Problem]:
    """What render refuses in a family even under --no-validate: its name and its key fields become
    C++ identifiers and string literals of select_kernel.h."""
    yield from check_name(family.family, ("family",), "family")
    for i, f in enumerate(family.dispatch.key):
        if not key_field_ok(f):
            yield Problem("dispatch-key", f"dispatch key field '{shown(f)[:80]}' is not a scalar spec field",
                          loc=("dispatch", "key", i), fix="use dotted names such as input_dtype, head_dim, "
                          "store.dtype, store.scale, layout.page_size")


# the types a `require` entry can hold (kgen.spec.DispatchValue): a key field of any other type (a
# float, or an optional field left unset) could never be required
_REQUIRABLE = (str, int, bool)


def check_family(family: Family, variants: list[Variant]) -> Iterator[Problem]:
    """Family rules. Problems about the family file carry its locs; about a variant, its own."""
    guards = list(check_family_guards(family))
    yield from guards
    key = family.dispatch.key
    bad_fields = any(p.rule == "dispatch-key" for p in guards)
    if len(set(key)) != len(key):
        bad_fields = True
        yield Problem("dispatch-key", "a dispatch key field is listed twice", loc=("dispatch", "key"),
                      fix="list each field once")
    if not key:
        yield Problem("dispatch-key", "the dispatch key is empty", loc=("dispatch", "key"),
                      fix="name the fields that select a variant")
    if not family.variants:
        yield Problem("family-variants", "the family lists no variants: select_kernel would serve nothing",
                      loc=("variants",), fix="list spec files (relative to this file) or inline specs")
    loaded = [(v, v.spec) for v in variants if v.spec is not None]
    if not bad_fields:
        for i, f in enumerate(key):
            odd = [(spec, field_value(spec, f)) for _, spec in loaded
                   if not isinstance(field_value(spec, f), _REQUIRABLE)]
            if odd:
                bad_fields = True
                odd_spec, value = odd[0]
                yield Problem("dispatch-key", f"key field '{f}' is {value!r} in variant '{odd_spec.name}': a require "
                              "entry holds only strings, integers and booleans, so no entry could ask for it",
                              loc=("dispatch", "key", i), fix=f"drop '{f}' from the key, or set it in every variant")
    by_name: dict[str, Variant] = {}
    for v, spec in loaded:
        if spec.name in by_name:
            yield v.locate(Problem("family-names", f"two variants are named '{spec.name}' (names become file "
                                   "and symbol names)", loc=("name",), fix="rename one"))
        by_name.setdefault(spec.name, v)
    if bad_fields or not key:
        return
    by_key: dict[tuple, tuple[Variant, Spec]] = {}
    for v, spec in loaded:
        k = variant_key(spec, key)
        if k in by_key:
            other = by_key[k][1]
            yield v.locate(Problem("dispatch-unique", f"variants '{other.name}' and '{spec.name}' share the "
                                   f"dispatch key {format_key(key, k)}: select_kernel could not choose",
                                   loc=("name",), fix="make them differ in a key field, or add a field to the key"))
        else:
            by_key[k] = (v, spec)
    served = dict(by_key)
    used: set[tuple] = set()
    malformed = False
    for i, entry in enumerate(family.dispatch.require):
        missing = [f for f in key if f not in entry]
        extra = [f for f in entry if f not in key]
        if missing or extra:
            what = "; ".join(x for x in (missing and f"missing {', '.join(missing)}",
                                         extra and f"not in the key: {', '.join(extra)}") if x)
            yield Problem("dispatch-require", f"require entry {i} does not spell the key ({what})",
                          loc=("dispatch", "require", i), fix=f"give exactly the key fields: {', '.join(key)}")
            malformed = True
            continue
        want = tuple(entry[f] for f in key)
        matches = [k for k in served if _key_eq(k, want)]
        if not matches:
            supported = "; ".join(format_key(key, k) for k in served) or "none"
            yield Problem("dispatch-require", f"no variant serves {format_key(key, want)}; the family serves: "
                          f"{supported}", loc=("dispatch", "require", i),
                          fix="add a variant for it, or drop the entry")
        used.update(matches)
    if malformed:
        return  # a malformed entry may have meant any variant: do not guess which are unused
    for k, (v, spec) in served.items():
        if k not in used:
            yield v.locate(Problem("dispatch-unused", f"variant '{spec.name}' ({format_key(key, k)}) is not "
                                   "required by the dispatch", loc=("name",),
                                   fix="add a require entry for it, or drop it", severity="warning"))


def _key_eq(a: tuple, b: tuple) -> bool:
    # strict: 64 != "64", True != 1
    return all(type(x) is type(y) and x == y for x, y in zip(a, b))
