"""The clamping rules of watchJob's two periods (docs/protocol.md §4)."""

from .faults import InvalidValueFault

DEFAULT_PROGRESS_UPDATE_PERIOD = 1000
DEFAULT_MAXIMUM_POLLING_PERIOD = 50000
MIN_PERIOD = 250
MAX_PERIOD = 50000


def _integer(name: str, value: object, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValueFault(
            f"{name} must be an integer number of milliseconds", parameter=name, value=str(value)
        )
    return value


def watch_periods(
    progress_update_period: object = None, maximum_polling_period: object = None
) -> tuple[int, int]:
    """``(progressUpdatePeriod, maximumPollingPeriod)`` in ms after clamping.

    Values under 250 (negative ones too) are taken as 250, over 50000 as 50000; the
    maximum polling period is at least the progress update period.
    """
    update = _integer(
        "progressUpdatePeriod", progress_update_period, DEFAULT_PROGRESS_UPDATE_PERIOD
    )
    maximum = _integer(
        "maximumPollingPeriod", maximum_polling_period, DEFAULT_MAXIMUM_POLLING_PERIOD
    )
    update = min(max(update, MIN_PERIOD), MAX_PERIOD)
    maximum = min(max(maximum, update), MAX_PERIOD)
    return update, maximum
