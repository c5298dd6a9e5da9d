"""XDima: distance matrices (great circle × detour factor) as a long operation.

``createDistanceMatrix`` computes, row block by row block, the distance (m) and travel
time (s) from every start location to every destination; it reports a
``DistanceMatrixProgress`` after each block and, when stopped, answers the rows done so
far (the framework adds the IntermediateResponseLimitation).  The largest matrix
accepted is the ``max_cells`` setting's cells (``[services.XDima] max_cells``, 4 000 000
by default; the value in force when a request is checked, so an edit applies live).

``contentsFormat`` ``ENCODED_ARRAYS`` answers the matrix in ``encodedContents``: each of
distances and travel times as the base64 of its little-endian int32 values, row-major
(docs/xdima-encoded.md), instead of one ``rows`` item per start location.
"""

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from xruntime.author import (
    Child,
    InvalidValueFault,
    JobContext,
    Joined,
    MissingParameterFault,
    Service,
    Table,
)

from ..geo import largest_values
from .types import (
    CreateDistanceMatrixRequest,
    DistanceMatrixCalculationFault,
    DistanceMatrixContentsFormat,
    DistanceMatrixEncodedContents,
    DistanceMatrixProfile,
    DistanceMatrixProgress,
    DistanceMatrixResponse,
    DistanceMatrixRow,
    DistanceMatrixStatus,
    DistanceMatrixSummary,
    Location,
)

DEFAULT_SPEED_KMH = 50.0
DEFAULT_DETOUR_FACTOR = 1.3
ENCODED = "ENCODED_ARRAYS"
INT32_MAX = 2**31 - 1

service = Service(
    "XDima",
    "Distance matrices: great-circle distances and travel times.",
    worker_imports=("numpy", "xruntime_services.xdima.compute"),
)
service.declare(DistanceMatrixProgress)
MAX_CELLS = service.setting(
    "max_cells",
    int,
    4_000_000,  # a 2 000 × 2 000 matrix
    "the largest matrix accepted, in cells (starts × destinations); a larger one is refused "
    "(`InvalidValueFault`)",
    minimum=1,
)

THREADS = service.setting(
    "threads",
    int,
    0,
    "threads computing one matrix's row blocks at once (NumPy releases the GIL): 0 is one "
    "per core (a child job's: one per core of its worker's share); 1 computes a block at a "
    "time",
    minimum=0,
    maximum=256,
)


def _points(locations: Iterable[Location]) -> list[tuple[float, float]]:
    return [(loc.longitude, loc.latitude) for loc in locations]


def check(request: CreateDistanceMatrixRequest, settings: Mapping[str, object]) -> None:
    """Refuse at once: no start location, a matrix larger than ``max_cells`` (its
    value in force, in ``settings``), or the encoded form (int32) for a profile so slow
    that a travel time could pass 2³¹ − 1 s."""
    if not request.startLocations:
        raise MissingParameterFault(
            "at least one start location is needed", parameter="startLocations"
        )
    rows = len(request.startLocations)
    columns = len(request.destinationLocations or request.startLocations)
    limit = settings[MAX_CELLS.name]
    assert isinstance(limit, int)  # declared an int, checked when the file was read
    if rows * columns > limit:
        raise InvalidValueFault(
            f"the matrix would have {rows} × {columns} = {rows * columns} cells, more than the "
            f"{limit} allowed",
            parameter="destinationLocations" if request.destinationLocations else "startLocations",
            value=str(rows * columns),
            hint="Split the locations into several smaller matrices.",
        )
    if request.contentsFormat == ENCODED:
        profile = request.profile or DistanceMatrixProfile()  # type: ignore[truthy-function]
        speed = profile.averageSpeedKmh or DEFAULT_SPEED_KMH
        longest, slowest = largest_values(profile.detourFactor or DEFAULT_DETOUR_FACTOR, speed)
        if slowest > INT32_MAX:
            raise InvalidValueFault(
                f"at {speed} km/h a travel time could exceed 2³¹ − 1 s, which the encoded "
                "form (int32) cannot hold",
                parameter="profile.averageSpeedKmh",
                value=str(speed),
                hint="Use contentsFormat ARRAYS, or a speed of at least "
                f"{longest / (INT32_MAX - 1) * 3.6:.4f} km/h with this detour factor.",
            )


def result_bound(request: CreateDistanceMatrixRequest) -> int:
    """The most a matrix takes as stored: its cells as two int32 each (a distance and a
    travel time, in either contents format), a little per row, and the summary."""
    rows = len(request.startLocations or ())
    columns = len(request.destinationLocations or ()) or rows
    return rows * columns * 8 + rows * 64 + 64 * 1024


@service.long_operation(
    request=CreateDistanceMatrixRequest,
    response=DistanceMatrixResponse,
    faults=(DistanceMatrixCalculationFault,),
    validate=check,
    result_bound=result_bound,
)
def createDistanceMatrix(
    request: CreateDistanceMatrixRequest, job: JobContext
) -> DistanceMatrixResponse | Joined | Table:
    if min(request.parallelism or 1, len(request.startLocations)) > 1:
        return _in_parallel(request, job)
    import numpy as np  # NumPy is loaded only where jobs run

    from . import compute

    began = time.monotonic()
    job.report_progress(DistanceMatrixProgress(status="PREPROCESSING", calculationProgress=0))
    # (a field declared as a bare class, ``profile = DistanceMatrixProfile``, reads as that
    # class to mypy; spyne's metaclass makes it the value, or None, on an instance)
    profile = request.profile or DistanceMatrixProfile()  # type: ignore[truthy-function]
    speed = profile.averageSpeedKmh or DEFAULT_SPEED_KMH
    detour = profile.detourFactor or DEFAULT_DETOUR_FACTOR
    n = len(request.startLocations)
    destinations_given = request.destinationLocations or request.startLocations
    m = len(destinations_given)
    try:
        starts = compute.to_radians(_points(request.startLocations))
        destinations = compute.to_radians(_points(destinations_given))
        kinds = compute.matrix_dtype(detour, speed)
        metres: np.ndarray = np.empty((n, m), kinds[0])
        seconds: np.ndarray = np.empty((n, m), kinds[1])
    except (MemoryError, FloatingPointError) as exc:
        raise _calculation_fault(n, m, exc) from exc

    extremes: dict[int, tuple[int, int, int]] = {}  # a block's first row: its summary's part

    def rows(span: tuple[int, int]) -> None:
        low, high = span
        compute.block_into(
            (starts[0][low:high], starts[1][low:high]),
            destinations,
            detour,
            speed,
            metres[low:high],
            seconds[low:high],
        )
        # read while the block is in the cache, not in three passes over the matrix after
        block_metres, block_seconds = metres[low:high], seconds[low:high]
        extremes[low] = (
            int(block_metres.min()),
            int(block_metres.max()),
            int(block_seconds.max()),
        )

    done = 0
    step = compute.block_rows(m)
    blocks = [(low, min(low + step, n)) for low in range(0, n, step)]
    pause = (request.blockPauseMs or 0) / 1000
    # a round is as many blocks as threads (one at a time with a pause: it is per block)
    width = 1 if pause else _threads(job.settings[THREADS.name], job.cores)
    with ThreadPoolExecutor(width) as pool:
        for first in range(0, len(blocks), width):
            if job.stop_requested:
                break
            round_ = blocks[first : first + width]
            try:
                for _ in pool.map(rows, round_):
                    pass
            except (MemoryError, FloatingPointError) as exc:
                raise _calculation_fault(n, m, exc) from exc
            done = round_[-1][1]
            job.report_progress(
                DistanceMatrixProgress(
                    status="CALCULATING_MATRIX", calculationProgress=done * 100 // n
                )
            )
            if pause and done < n and job.wait(pause):
                break  # stopped during the pause
    if done == 0:  # stopped before the first block
        raise job.stop_fault()
    if done == n:
        job.report_progress(DistanceMatrixProgress(status="DONE", calculationProgress=100))
    metres, seconds = metres[:done], seconds[:done]
    summary = DistanceMatrixSummary(
        numberOfStartLocations=n,
        numberOfDestinationLocations=m,
        numberOfRowsComputed=done,
        averageSpeedKmh=speed,
        detourFactor=detour,
        minimumDistance=min(extremes[low][0] for low, _ in blocks if low < done),
        maximumDistance=max(extremes[low][1] for low, _ in blocks if low < done),
        maximumTravelTime=max(extremes[low][2] for low, _ in blocks if low < done),
        computationTimeMs=int((time.monotonic() - began) * 1000),
    )
    # the rows are stored from the arrays, never as one spyne object per row
    if request.contentsFormat == ENCODED:
        return job.encoded(
            DistanceMatrixResponse(summary=summary),
            "encodedContents",
            distances=metres,
            travelTimes=seconds,
        )
    return job.table(
        DistanceMatrixResponse(summary=summary), "rows", distances=metres, travelTimes=seconds
    )


def _threads(setting: object, cores: int) -> int:
    """The threads of the ``threads`` setting's value (0: one per core the job may use,
    ``job.cores``: a child job's share of them, so that a parent's children do not
    each run as many threads as there are cores)."""
    return int(cast(int, setting)) or cores


def _in_parallel(request: CreateDistanceMatrixRequest, job: JobContext) -> Joined | Table:
    """``parallelism`` > 1: the start locations in as many contiguous row blocks, each
    computed by a child job (on any worker of any node, docs/protocol.md §13); the children's
    rows are joined in the store's form, never decoded, so the result is the one
    ``parallelism = 1`` stores, assembled at almost no cost.  After a stop the rows
    are those of the blocks done, up to the first block not complete."""
    n = len(request.startLocations)
    size = -(-n // min(request.parallelism, n))
    destinations = request.destinationLocations or request.startLocations
    outcomes = job.run_children(
        [
            Child(
                "XDima",
                "createDistanceMatrix",
                CreateDistanceMatrixRequest(
                    startLocations=request.startLocations[low : low + size],
                    destinationLocations=destinations,
                    profile=request.profile,
                    blockPauseMs=request.blockPauseMs,
                    contentsFormat=request.contentsFormat,
                ),
            )
            for low in range(0, n, size)
        ]
    )
    parts, summaries = [], []
    for outcome in outcomes:  # all succeeded, unless the job was stopped
        if not outcome.succeeded:
            break
        summary = outcome.result_without("rows").summary
        parts.append(outcome)
        summaries.append(summary)
        if summary.numberOfRowsComputed < summary.numberOfStartLocations:
            break  # rows must follow on: nothing after a partial block
    if not parts:  # stopped before any block was done
        raise job.stop_fault()
    first = summaries[0]
    summary = DistanceMatrixSummary(
        numberOfStartLocations=n,
        numberOfDestinationLocations=len(destinations),
        numberOfRowsComputed=sum(s.numberOfRowsComputed for s in summaries),
        averageSpeedKmh=first.averageSpeedKmh,
        detourFactor=first.detourFactor,
        minimumDistance=min(s.minimumDistance for s in summaries),
        maximumDistance=max(s.maximumDistance for s in summaries),
        maximumTravelTime=max(s.maximumTravelTime for s in summaries),
        computationTimeMs=sum(s.computationTimeMs for s in summaries),
    )
    if request.contentsFormat == ENCODED:  # the children's int32 bytes, end to end
        import numpy as np

        encoded = [part.encoded("encodedContents") for part in parts]
        return job.encoded(
            DistanceMatrixResponse(summary=summary),
            "encodedContents",
            **{
                name: np.frombuffer(b"".join(e[name] for e in encoded), "<i4")
                for name in ("distances", "travelTimes")
            },
        )
    return job.join(DistanceMatrixResponse(summary=summary), "rows", parts)


def _calculation_fault(
    n: int, m: int, exc: BaseException | None = None
) -> DistanceMatrixCalculationFault:
    why = "there is not enough memory" if exc is None or isinstance(exc, MemoryError) else str(exc)
    return DistanceMatrixCalculationFault(
        f"the {n} × {m} distance matrix could not be computed: {why}",
        hint="Try a smaller matrix, or later when the server is less busy.",
        numberOfStartLocations=n,
        numberOfDestinationLocations=m,
    )


__all__ = [
    "service",
    "MAX_CELLS",
    "check",
    "createDistanceMatrix",
    "Location",
    "CreateDistanceMatrixRequest",
    "DistanceMatrixProfile",
    "DistanceMatrixProgress",
    "DistanceMatrixResponse",
    "DistanceMatrixRow",
    "DistanceMatrixEncodedContents",
    "DistanceMatrixContentsFormat",
    "DistanceMatrixStatus",
    "DistanceMatrixSummary",
    "DistanceMatrixCalculationFault",
]
