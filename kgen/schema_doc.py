"""The spec field reference (docs/spec.md is exactly `field_reference()`; `kgen schema` prints it and
a test keeps them equal), generated from the models in kgen/spec.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from .spec import Spec


def _type_name(ann) -> str:
    import typing

    args = typing.get_args(ann)
    if typing.get_origin(ann) is Literal:
        return " \\| ".join(str(a) for a in args)
    if typing.get_origin(ann) is list:
        return f"list of {_type_name(args[0])}"
    if args:
        return " \\| ".join(_type_name(a) for a in args if a is not type(None)) + (
            " \\| null" if type(None) in args else "")
    return {"int": "int", "float": "float", "str": "str", "bool": "bool"}.get(getattr(ann, "__name__", ""), str(ann))


def _yaml_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, str) and not v else str(v)


def field_reference() -> str:
    """Markdown table of every spec field: dotted name, type, default (or required), meaning."""
    lines = ["# kgen spec fields", "",
             "Generated from `kgen/spec.py` by `kgen schema` (the one place defaults live). Unknown keys "
             "are errors; values are checked by the rules (`kgen validate`).", "",
             "| field | type | default | meaning |", "|---|---|---|---|"]

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            ann = f.annotation
            nested = [a for a in (ann, *getattr(ann, "__args__", ()))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
            if nested:
                walk(nested[0], f"{prefix}{name}.")
                continue
            default = ("**required**" if f.is_required()
                       else f"`{_yaml_value(f.get_default(call_default_factory=True))}`")
            lines.append(f"| `{prefix}{name}` | {_type_name(ann)} | {default} | {f.description or ''} |")

    walk(Spec, "")
    return "\n".join(lines) + "\n"
