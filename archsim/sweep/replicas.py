"""replicas.csv: the points of a sweep with a `seed` axis, grouped by their other axes, as mean and 95 % confidence
half-width (Student's t over the ok replicas) of every numeric result column."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

# Student's t at 0.975 for 1..30 degrees of freedom; beyond, the normal 1.960 (within 2 % from 31 on)
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_975(dof: int) -> float:
    return T_975[dof - 1] if dof <= len(T_975) else 1.960


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the 95 % half-width of the mean (None for one value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_975(n - 1) * sd / math.sqrt(n)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def replicas_text(axis_keys: tuple[str, ...], points: list[dict[str, Any]], flats: list[dict[str, Any]],
                  statuses: list[str]) -> str | None:
    """The CSV over `points` (axis values), their flattened results and statuses, in the points' order; None
    without a `seed` axis. A group's row has its other axes, `replicas` (ok ones), then `<column>.mean` and
    `<column>.ci95` for every result column numeric in all of its ok replicas."""
    if "seed" not in axis_keys:
        return None
    others = [k for k in axis_keys if k != "seed"]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for point, flat, status in zip(points, flats, statuses, strict=True):
        group = groups.setdefault(tuple(str(point[k]) for k in others), [])
        if status == "ok":
            group.append(flat)
    columns: dict[str, None] = {}
    stats = []
    for key, oks in groups.items():
        row: dict[str, Any] = {}
        for column in (oks[0] if oks else {}):
            values = [_number(str(f.get(column, ""))) for f in oks]
            if all(v is not None for v in values):
                mean, half = mean_ci95([float(v) for v in values if v is not None])
                row[f"{column}.mean"], row[f"{column}.ci95"] = mean, half
                columns.setdefault(f"{column}.mean", None)
                columns.setdefault(f"{column}.ci95", None)
        stats.append((key, len(oks), row))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*others, "replicas", *columns])
    for key, n, row in stats:
        writer.writerow([*key, n, *("" if row.get(c) is None else repr(row[c]) for c in columns)])
    return buf.getvalue()
