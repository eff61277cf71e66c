"""PinLater-py: a wire-compatible PinLater job-queue server."""

__version__ = "0.1.0"
