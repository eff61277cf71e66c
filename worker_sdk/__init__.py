"""PinLater worker SDK: the typed client (and, later, the worker framework built on it)."""

from worker_sdk.client import PinLaterClient
from worker_sdk.errors import (
    PinLaterApplicationError,
    PinLaterError,
    PinLaterTransportError,
)
from worker_sdk.models import (
    AckInfo,
    Acks,
    CheckpointRequest,
    DequeuedJob,
    Job,
    JobInfo,
    JobState,
)
from worker_sdk.serverset import ServerSetError

__all__ = [
    "AckInfo", "Acks", "CheckpointRequest", "DequeuedJob", "Job", "JobInfo", "JobState",
    "PinLaterApplicationError", "PinLaterClient", "PinLaterError", "PinLaterTransportError",
    "ServerSetError",
]
