"""Checks of a PlanToursRequest beyond what the field types say (pure Python, quick:
it runs on the server's request threads when a job is started)."""

from typing import TypedDict

from xruntime.author import InvalidValueFault, MissingParameterFault

from .types import PlanToursRequest, TimeWindow

#: The most orders one request may hold.
MAX_ORDERS = 2000


def _invalid(parameter: str, value: object, message: str) -> InvalidValueFault:
    shown = value if isinstance(value, str) else repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "…"
    return InvalidValueFault(message, parameter=parameter, value=shown)


def _check_window(window: TimeWindow | None, path: str) -> None:
    if window is not None and window.start > window.end:
        raise _invalid(
            f"{path}.end",
            window.end,
            f"{path} ends ({window.end}) before it starts ({window.start})",
        )


def check(request: PlanToursRequest) -> None:
    """Raise InvalidValueFault/MissingParameterFault naming the field of the first
    problem found; answer nothing when the request can be planned."""
    orders = request.orders or []
    if not orders:
        raise MissingParameterFault("there are no orders to plan", parameter="orders")
    if len(orders) > MAX_ORDERS:
        raise _invalid(
            "orders",
            len(orders),
            f"at most {MAX_ORDERS} orders are allowed in one request, not {len(orders)}",
        )
    dimensions = len(request.fleet.capacities or [])
    _check_window(request.fleet.shift, "fleet.shift")
    seen: dict[str, int] = {}  # order id → its index
    for i, order in enumerate(orders):
        path = f"orders[{i}]"
        if not order.id.strip():
            raise _invalid(f"{path}.id", order.id, f"{path}.id is empty")
        if order.id in seen:
            raise _invalid(
                f"{path}.id",
                order.id,
                f"the order id {order.id!r} is used twice (orders[{seen[order.id]}] too)",
            )
        seen[order.id] = i
        demand = order.demand or []
        if demand and len(demand) != dimensions:
            raise _invalid(
                f"{path}.demand",
                demand,
                f"{path}.demand has {len(demand)} amounts but fleet.capacities has "
                f"{dimensions}: give one amount per capacity",
            )
        _check_window(order.timeWindow, f"{path}.timeWindow")

    if request.matrix is not None and request.profile is not None:
        raise _invalid("profile", "profile", "give either matrix or profile, not both")
    if request.matrix is None and request.profile is None:
        raise MissingParameterFault(
            "give the travel distances and durations as a matrix or a profile to compute them from",
            parameter="profile",
        )
    if request.matrix is not None:
        size = len(orders) + 1
        rows = request.matrix.rows or []
        if len(rows) != size:
            raise _invalid(
                "matrix.rows",
                len(rows),
                f"matrix.rows has {len(rows)} rows; {size} are needed "
                f"(the depot, then each order in the order given)",
            )
        for i, row in enumerate(rows):
            for name in ("distances", "durations"):
                values = getattr(row, name) or []
                if len(values) != size:
                    raise _invalid(
                        f"matrix.rows[{i}].{name}",
                        len(values),
                        f"matrix.rows[{i}].{name} has {len(values)} values; "
                        f"{size} are needed (one per location)",
                    )


class Bounds(TypedDict):
    """The bounds of a search (``PlanningOptions``, defaults filled in)."""

    max_time_s: float
    max_iterations: int | None
    max_no_improvement: int
    seed: int


def options(request: PlanToursRequest) -> Bounds:
    """The planning bounds with their defaults filled in."""
    o = request.options
    get = (lambda name: getattr(o, name, None)) if o is not None else (lambda name: None)
    return {
        "max_time_s": (get("maxComputationTimeMs") or 10_000) / 1000,
        "max_iterations": get("maxIterations"),
        "max_no_improvement": get("maxIterationsWithoutImprovement") or 2000,
        "seed": get("seed") or 0,
    }
