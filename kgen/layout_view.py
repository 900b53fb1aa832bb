"""`kgen layout`: draw one page's byte map so a person sees where everything lives."""

from __future__ import annotations

from .layout import Layout

BAR_WIDTH = 64
FILL = {"rows": "█", "scales": "▓", "padding": "░"}
# ANSI colours (only on a terminal, and not under NO_COLOR); plain text otherwise. No rich here:
# importing it costs ~40 ms of a ~150 ms `kgen layout`.
COLOR = {"rows": "36", "scales": "35", "padding": "90", "bold": "1"}


def _use_color() -> bool:
    import os
    import sys

    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _c(text: str, style: str, on: bool) -> str:
    return f"\x1b[{COLOR[style]}m{text}\x1b[0m" if on else text


def layout_json(layouts: list[Layout]) -> dict:
    out = []
    for lay in layouts:
        out.append({
            "name": lay.spec.name,
            "page_size": lay.page_size,
            "row_bytes": lay.row_bytes,
            "scale_stride": lay.scale_stride,
            "bytes_per_token": lay.bytes_per_token,
            "page_bytes": lay.page_bytes,
            "regions": [{"name": r.name, "offset": r.offset, "size": r.size, "note": r.note} for r in lay.regions()],
            "row": [{"name": r.name, "offset": r.offset, "size": r.size, "note": r.note} for r in lay.row_parts()],
            "token_offsets": {
                "value": f"t * {lay.row_bytes}",
                "scale": (f"{lay.scale_region_offset} + t * {lay.scale_stride}"
                          + (f" + g * {lay.scale_unit}" if lay.blocks_per_token > 1 else ""))
                if lay.scale_unit else None,
            },
        })
    return {"layouts": out}


def _bar(lay: Layout, color: bool) -> str:
    cells = []
    total = lay.page_bytes
    for r in lay.regions():
        n = max(1, round(BAR_WIDTH * r.size / total))
        cells.append(_c(FILL[r.name] * n, r.name, color))
    return "".join(cells)


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
            .rstrip() for r in rows]


def format_layout(lay: Layout, color: bool = False) -> str:
    s = lay.spec
    out = [f"{_c(s.name, 'bold', color)}  {s.store.dtype} store, scale {s.store.scale}, P = {lay.page_size}",
           f"  bytes/token: {lay.bytes_per_token_formula()}",
           f"  page bytes:  {lay.page_bytes_formula()}",
           f"  |{_bar(lay, color)}| {lay.page_bytes} B"]
    rows = [["region", "offset", "end", "size", "layout"]]
    rows += [[r.name, str(r.offset), str(r.end), str(r.size), r.note] for r in lay.regions()]
    table = _table(rows, right={1, 2, 3})
    out.append(table[0])
    for r, line in zip(lay.regions(), table[1:]):
        out.append(_c(r.name, r.name, color) + line[len(r.name):])
    row = ", ".join(f"{r.name} @{r.offset} +{r.size} ({r.note})" for r in lay.row_parts())
    out.append(f"  row t at t * {lay.row_bytes}: {row}")
    if lay.scale_unit:
        g = f" + g * {lay.scale_unit} (g < {lay.blocks_per_token})" if lay.blocks_per_token > 1 else ""
        out.append(f"  scales of token t at {lay.scale_region_offset} + t * {lay.scale_stride}{g}")
    last = lay.page_size - 1
    if lay.page_size > 1:
        out.append(f"  e.g. token {last}: row @{lay.value_offset(last)}"
                   + (f", scale @{lay.scale_offset(last)}" if lay.scale_unit else ""))
    return "\n".join(out) + "\n"


def print_layout(lay: Layout) -> None:
    print(format_layout(lay, _use_color()))
