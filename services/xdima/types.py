"""XDima's request, response, progress and fault types."""

from xruntime.author import (
    Double,
    Enum,
    JobProgress,
    Long,
    ProcessingFault,
    RequestBase,
    ResponseBase,
    Unicode,
    XModel,
    repeated,
    required,
)


class Location(XModel):
    """A point in WGS 84 degrees."""

    longitude = required(Double, ge=-180, le=180)
    latitude = required(Double, ge=-90, le=90)


class DistanceMatrixProfile(XModel):
    """How distances become road-like distances and travel times."""

    averageSpeedKmh = Double(gt=0, le=1000)  # default 50 km/h
    detourFactor = Double(ge=1, le=10)  # default 1.3: road distance / great circle


DistanceMatrixContentsFormat = Enum(
    "ARRAYS", "ENCODED_ARRAYS", type_name="DistanceMatrixContentsFormat"
)


class CreateDistanceMatrixRequest(RequestBase):
    startLocations = repeated(Location)  # required, at least one
    destinationLocations = repeated(Location)  # default: the start locations
    profile = DistanceMatrixProfile
    blockPauseMs = Double(ge=0, le=60_000)  # testing aid: sleep after each row block
    parallelism = Long(ge=1, le=64)  # row blocks computed as child jobs (default 1)
    # ARRAYS (default): the matrix in ``rows``; ENCODED_ARRAYS: in ``encodedContents``
    contentsFormat = DistanceMatrixContentsFormat


class DistanceMatrixRow(XModel):
    """From one start location to every destination, in the destinations' order."""

    distances = repeated(Long)  # metres
    travelTimes = repeated(Long)  # seconds


class DistanceMatrixEncodedContents(XModel):
    """The matrix as base64 of little-endian int32, row-major: ``numberOfRowsComputed``
    rows of ``numberOfDestinationLocations`` values each (docs/xdima-encoded.md)."""

    distances = Unicode  # metres
    travelTimes = Unicode  # seconds


class DistanceMatrixSummary(XModel):
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
    rows = repeated(DistanceMatrixRow)  # one per start location computed, in order
    summary = DistanceMatrixSummary
    encodedContents = DistanceMatrixEncodedContents  # with contentsFormat ENCODED_ARRAYS


DistanceMatrixStatus = Enum(
    "PREPROCESSING", "CALCULATING_MATRIX", "DONE", type_name="DistanceMatrixStatus"
)


class DistanceMatrixProgress(JobProgress):
    status = DistanceMatrixStatus
    calculationProgress = Long  # percent of the rows computed (0-100)


class DistanceMatrixCalculationFault(ProcessingFault):
    """The matrix could not be computed for a valid request (e.g. out of memory)."""

    numberOfStartLocations = Long
    numberOfDestinationLocations = Long
