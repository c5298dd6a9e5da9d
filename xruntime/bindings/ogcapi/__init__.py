"""OGC API – Processes – Part 1: Core 1.0 at ``/ogcapi`` (docs/ogcapi.md): the same jobs
as every other binding, described and driven as the standard says.

``binding`` answers the requests; ``processes`` makes each long operation a process,
``jobs`` a job's record a statusInfo and the job list's filters, ``problems`` every
error an RFC 7807 document, ``document`` the binding's OpenAPI 3.0 document, ``prefer``
reads the ``Prefer`` header (RFC 7240).
"""
