"""PinLater worker SDK: the typed client and the worker framework built on it."""

from pinlater.common.serverset import ServerSetError
from worker_sdk.client import PinLaterClient
from worker_sdk.errors import (
    PinLaterApplicationError,
    PinLaterError,
    PinLaterTransportError,
)
from worker_sdk.job import FailJob, JobContext, RetryJob
from worker_sdk.models import (
    AckInfo,
    Acks,
    CheckpointRequest,
    DequeuedJob,
    Job,
    JobInfo,
    JobState,
)
from worker_sdk.retry import ConstantRetry, ExponentialRetry, FunctionRetry, RetryPolicy
from worker_sdk.worker import Worker, WorkerStats

__all__ = [
    "AckInfo",
    "Acks",
    "CheckpointRequest",
    "ConstantRetry",
    "DequeuedJob",
    "ExponentialRetry",
    "FailJob",
    "FunctionRetry",
    "Job",
    "JobContext",
    "JobInfo",
    "JobState",
    "PinLaterApplicationError",
    "PinLaterClient",
    "PinLaterError",
    "PinLaterTransportError",
    "RetryJob",
    "RetryPolicy",
    "ServerSetError",
    "Worker",
    "WorkerStats",
]
