"""A job's progress as a person reads it: a fraction for a bar, and a short text.

The CLI (``xruntime watch``), the status page and anything else that draws a bar take
a progress in the JSON binding's form (a dict with ``"$type"``, as ``watchJob`` and
``listJobs`` answer it) and get the same reading from here, whatever the service:

- ``BulkProgress`` (the framework's, and a parent's over its children): done is
  ``successful + failed`` out of ``successful + failed + remaining``;
- a service's own progress with a percentage field (a name ending in ``Progress`` or
  ``Percent``, 0–100, as XDima's ``calculationProgress``): that percentage;
- anything else (XTour's iterations and best cost): no fraction, its fields as text.
"""

from collections.abc import Iterable
from typing import NamedTuple


class ProgressView(NamedTuple):
    fraction: float | None  # 0.0–1.0 for a bar, None when the progress has no end
    text: str  # e.g. "37/100 (2 failed)", "42 %", "iterations 120, bestCost 9"
    done: int | None = None  # BulkProgress: finished units and their total
    total: int | None = None


def view_of(progress: object) -> ProgressView | None:
    """The reading of a progress in JSON form; None when there is no progress."""
    if not isinstance(progress, dict):
        return None
    fields = {k: v for k, v in progress.items() if k != "$type" and v is not None}
    if not fields:
        return None
    if {"successful", "remaining"} <= fields.keys() and _all_counts(
        fields, ("successful", "failed", "remaining")
    ):
        successful, failed, remaining = (
            int(fields.get(k) or 0) for k in ("successful", "failed", "remaining")
        )
        done, total = successful + failed, successful + failed + remaining
        text = f"{done}/{total}" + (f" ({failed} failed)" if failed else "")
        return ProgressView(done / total if total else 1.0, text, done, total)
    for name, value in fields.items():
        if name.endswith(("Progress", "Percent")) and _is_count(value) and 0 <= value <= 100:
            others = _text({k: v for k, v in fields.items() if k != name})
            return ProgressView(value / 100, f"{value} %" + (f", {others}" if others else ""))
    return ProgressView(None, _text(fields))


def _text(fields: dict) -> str:
    return ", ".join(f"{name} {value}" for name, value in fields.items())


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _all_counts(fields: dict, names: Iterable[str]) -> bool:
    return all(_is_count(fields[n]) and fields[n] >= 0 for n in names if n in fields)
