"""`kgen layout`: draw one page's byte map so a person sees where everything lives."""

from __future__ import annotations

from .layout import Layout

BAR_WIDTH = 64
FILL = {"rows": "█", "scales": "▓", "padding": "░"}
STYLE = {"rows": "cyan", "scales": "magenta", "padding": "grey50"}


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


def _bar(lay: Layout) -> str:
    cells = []
    total = lay.page_bytes
    for r in lay.regions():
        n = max(1, round(BAR_WIDTH * r.size / total))
        cells.append(f"[{STYLE[r.name]}]{FILL[r.name] * n}[/]")
    return "".join(cells)


def print_layout(lay: Layout) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console(highlight=False, soft_wrap=True)
    s = lay.spec
    c.print(f"[bold]{s.name}[/]  {s.store.dtype} store, scale {s.store.scale}, P = {lay.page_size}")
    c.print(f"  bytes/token: {lay.bytes_per_token_formula()}")
    c.print(f"  page bytes:  {lay.page_bytes_formula()}")
    c.print(f"  |{_bar(lay)}| {lay.page_bytes} B")
    t = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("region", "offset", "end", "size", "layout"):
        t.add_column(col, justify="right" if col in ("offset", "end", "size") else "left")
    for r in lay.regions():
        t.add_row(f"[{STYLE[r.name]}]{r.name}[/]", str(r.offset), str(r.end), str(r.size), r.note)
    c.print(t)
    row = ", ".join(f"{r.name} @{r.offset} +{r.size} ({r.note})" for r in lay.row_parts())
    c.print(f"  row t at t * {lay.row_bytes}: {row}")
    if lay.scale_unit:
        g = f" + g * {lay.scale_unit} (g < {lay.blocks_per_token})" if lay.blocks_per_token > 1 else ""
        c.print(f"  scales of token t at {lay.scale_region_offset} + t * {lay.scale_stride}{g}")
    last = lay.page_size - 1
    if lay.page_size > 1:
        c.print(f"  e.g. token {last}: row @{lay.value_offset(last)}"
                + (f", scale @{lay.scale_offset(last)}" if lay.scale_unit else ""))
    c.print()
