"""Point labels that do not overprint one another (the Pareto fronts of the PNG and the page).

Settings whose points coincide at display precision (x and y equal to DIGITS significant
digits) share one label naming each of them ("max_num_seqs=64, 128, 256"); each label then
takes the first of a few places around its point (right and above, right and below, left and
above, ...) where its box overlaps no label placed before it; where none is free, the PNG
lifts it until it is, and the page (whose text can only take those places) leaves it out: a
point's hover names its setting. Geometry is in pixels, y up.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servetune.reporting.collect import point_label, short_names
from servetune.reporting.numbers import fmt

DIGITS = 3  # significant digits at which two points coincide
# where a label goes, (side x, side y): its box starts right of the point (+1) or ends left of
# it (-1), and sits above (+1), below (-1) or centred on (0) it; tried in this order
PLACES = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0))
PLOTLY_POSITIONS = {
    (1, 1): "top right",
    (1, -1): "bottom right",
    (-1, 1): "top left",
    (-1, -1): "bottom left",
    (1, 0): "middle right",
    (-1, 0): "middle left",
}


def tie_groups(x, y, digits: int = DIGITS) -> list[list[int]]:
    """The indices of the points grouped where x and y agree to `digits` significant digits
    (non-finite values never agree), groups and members in order of first appearance."""
    groups: dict = {}
    for i, (a, b) in enumerate(
        zip(np.asarray(x, np.float64), np.asarray(y, np.float64), strict=True)
    ):
        key = (
            (f"{a:.{digits}g}", f"{b:.{digits}g}")
            if np.isfinite(a) and np.isfinite(b)
            else ("nan", i)
        )
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def tied_label(rows: pd.DataFrame, keys: list) -> str:
    """One label for the points `rows` (settings that coincide): the point label of a single
    row (collect.point_label over `keys`); where they differ in one key only, that key's values
    joined ("max_num_seqs=64, 128, 256"; beside other keys "order=fcfs, max_num_seqs=64/128");
    else the distinct point labels joined by "; "."""
    labels = list(dict.fromkeys(point_label(r, keys) for _, r in rows.iterrows()))
    if len(labels) == 1 or not keys:
        return labels[0]
    vary = [k for k in keys if rows[k].astype(str).nunique() > 1]
    if len(vary) != 1:
        return "; ".join(labels)
    names, sep = short_names(keys), ", " if len(keys) == 1 else "/"
    values = {k: sep.join(dict.fromkeys(fmt(v) for v in rows[k])) for k in keys}
    return ", ".join(f"{names[k]}={values[k] if k in vary else fmt(rows[k].iloc[0])}" for k in keys)


def front_labels(g: pd.DataFrame, x, y, on, keys: list) -> list[tuple[int, str]]:
    """[(position in g, label)]: one label per group of g's points coinciding at display
    precision (tie_groups over x, y) with a member on the front (mask `on`), drawn at its
    first front member and naming every member's setting (tied_label over `keys`)."""
    on = np.asarray(on, bool)
    out = []
    for members in tie_groups(x, y):
        first = next((i for i in members if on[i]), None)
        if first is not None:
            out.append((first, tied_label(g.iloc[members], keys)))
    return sorted(out)


def box(px: float, py: float, size: tuple, place: tuple, gap: float) -> tuple:
    """(x0, y0, x1, y1) in pixels of a label of `size` (width, height) at `place` (PLACES) of
    the point (px, py), `gap` pixels from it."""
    (w, h), (sx, sy) = size, place
    x0 = px + gap if sx > 0 else px - gap - w
    y0 = py + gap if sy > 0 else py - gap - h if sy < 0 else py - h / 2
    return x0, y0, x0 + w, y0 + h


def overlap(a: tuple, b: tuple) -> float:
    """The area (pixels^2) two boxes (x0, y0, x1, y1) share; 0 when they only touch."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _cost(boxes: list, b: tuple) -> float:
    return sum(overlap(b, o) for o in boxes)


def _inside(b: tuple, bounds: tuple | None, vertical: bool = True) -> bool:
    if bounds is None:
        return True
    across = bounds[0] <= b[0] and b[2] <= bounds[2]
    return across and (not vertical or (bounds[1] <= b[1] and b[3] <= bounds[3]))


def place(
    px, py, sizes: list, gap: float, stack: bool = False, bounds: tuple | None = None
) -> list[tuple]:
    """[(place, lift)] of labels at pixel points (px, py) of box `sizes` [(width, height)],
    in order: the first of PLACES whose box lies inside `bounds` (x0, y0, x1, y1; the plot
    area, None: anywhere) and overlaps no label placed before. Where none is free, with
    stack=True the first place that fits across is shifted by whole label heights (lift,
    pixels; down from a point in the top half of `bounds`, else up) until free (a figure that
    can shift a label anywhere), else (None, 0): no place (a figure that can only put text at
    PLACES leaves that label out)."""
    boxes, out = [], []
    for x, y, size in zip(px, py, sizes, strict=True):
        free = [
            p
            for p in PLACES
            if _inside(b := box(x, y, size, p, gap), bounds) and not _cost(boxes, b)
        ]
        p, lift = (free[0] if free else None), 0.0
        if p is None and stack:
            p = next(
                (q for q in PLACES if _inside(box(x, y, size, q, gap), bounds, False)), PLACES[0]
            )
            step = -size[1] if bounds is not None and y > (bounds[1] + bounds[3]) / 2 else size[1]
            while _cost(boxes, box(x, y + lift, size, p, gap)):
                lift += step
        if p is not None:
            boxes.append(box(x, y + lift, size, p, gap))
        out.append((p, lift))
    return out
