"""The one number formatter of servetune's tables, summaries and pages."""

from __future__ import annotations

import math

import numpy as np


def fmt(v, digits: int = 4, missing: str = "-") -> str:
    """`v` for a human: `missing` for None or NaN; "inf" for an infinity (an unlimited cap,
    `queue_cap=inf`); a whole float as an integer (4096.0 -> "4096"); other floats to `digits`
    significant digits ("0.01234", "1.235e+06"); anything else as str()."""
    if v is None:
        return missing
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return missing
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.{digits}g}"
    return str(v)
