"""XDima's request, response, progress and fault types."""

from spyne import Double, Enum, Long, Unicode

from xruntime.protocol.faults import ProcessingFault
from xruntime.protocol.types import (
    JobProgress,
    RequestBase,
    ResponseBase,
    XModel,
    repeated,
    required,
)

NAMESPACE = "http://xruntime.org/xserver/xdima"


class Location(XModel):
    """A point in WGS 84 degrees."""

    __namespace__ = NAMESPACE
    longitude = required(Double, ge=-180, le=180)
    latitude = required(Double, ge=-90, le=90)


class DistanceMatrixProfile(XModel):
    """How distances become road-like distances and travel times."""

    __namespace__ = NAMESPACE
    averageSpeedKmh = Double(gt=0, le=1000)  # default 50 km/h
    detourFactor = Double(ge=1, le=10)  # default 1.3: road distance / great circle


DistanceMatrixContentsFormat = Enum(
    "ARRAYS", "ENCODED_ARRAYS", type_name="DistanceMatrixContentsFormat"
)
DistanceMatrixContentsFormat.__namespace__ = NAMESPACE


class CreateDistanceMatrixRequest(RequestBase):
    __namespace__ = NAMESPACE
    startLocations = repeated(Location)  # required, at least one
    destinationLocations = repeated(Location)  # default: the start locations
    profile = DistanceMatrixProfile
    blockPauseMs = Double(ge=0, le=60_000)  # testing aid: sleep after each row block
    parallelism = Long(ge=1, le=64)  # row blocks computed as child jobs (default 1)
    # ARRAYS (default): the matrix in ``rows``; ENCODED_ARRAYS: in ``encodedContents``
    contentsFormat = DistanceMatrixContentsFormat


class DistanceMatrixRow(XModel):
    """From one start location to every destination, in the destinations' order."""

    __namespace__ = NAMESPACE
    distances = repeated(Long)  # metres
    travelTimes = repeated(Long)  # seconds


class DistanceMatrixEncodedContents(XModel):
    """The matrix as base64 of little-endian int32, row-major: ``numberOfRowsComputed``
    rows of ``numberOfDestinationLocations`` values each (docs/xdima-encoded.md)."""

    __namespace__ = NAMESPACE
    distances = Unicode  # metres
    travelTimes = Unicode  # seconds


class DistanceMatrixSummary(XModel):
    __namespace__ = NAMESPACE
    numberOfStartLocations = Long
    numberOfDestinationLocations = Long
    numberOfRowsComputed = Long  # < numberOfStartLocations when stopped early
    averageSpeedKmh = Double  # the profile in force (defaults filled in)
    detourFactor = Double
    minimumDistance = Long  # over the rows computed
    maximumDistance = Long
    maximumTravelTime = Long
    computationTimeMs = Long


class DistanceMatrixResponse(ResponseBase):
    __namespace__ = NAMESPACE
    rows = repeated(DistanceMatrixRow)  # one per start location computed, in order
    summary = DistanceMatrixSummary
    encodedContents = DistanceMatrixEncodedContents  # with contentsFormat ENCODED_ARRAYS


DistanceMatrixStatus = Enum(
    "PREPROCESSING", "CALCULATING_MATRIX", "DONE", type_name="DistanceMatrixStatus"
)
DistanceMatrixStatus.__namespace__ = NAMESPACE


class DistanceMatrixProgress(JobProgress):
    __namespace__ = NAMESPACE
    status = DistanceMatrixStatus
    calculationProgress = Long  # percent of the rows computed (0-100)


class DistanceMatrixCalculationFault(ProcessingFault):
    """The matrix could not be computed for a valid request (e.g. out of memory)."""

    __namespace__ = NAMESPACE
    numberOfStartLocations = Long
    numberOfDestinationLocations = Long
