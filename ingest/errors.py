"""One small error hierarchy.

Retriable is a marker: only errors that carry it may be retried, in one place.
Anything else, including an exception we do not know, is fatal.
"""


class IngestError(Exception):
    """Base of every error `ingest` raises on purpose."""


class Retriable:
    """Marker mixin: the operation may succeed if tried again as is."""
