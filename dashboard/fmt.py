"""How numbers are shown: one place, so every view formats alike. None shows as a dash."""

from __future__ import annotations

import pandas as pd

DASH = "–"


def number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    return f"{value:,.{digits}f}"


def ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.0%}"


def millis(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    ms = seconds * 1000.0
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:,.1f} ms"


def count(value: float | None) -> str:
    return DASH if value is None else f"{round(value):,}"


def table(frame: pd.DataFrame, formats: dict[str, str]) -> pd.DataFrame:
    """``frame`` with the named columns as display text, a dash where a value is missing.

    Text, not a pandas Styler: Streamlit shows a missing value of a styled frame as "None".
    """
    out = frame.copy()
    for column, pattern in formats.items():
        out[column] = [DASH if pd.isna(v) else pattern.format(v) for v in frame[column]]
    return out
