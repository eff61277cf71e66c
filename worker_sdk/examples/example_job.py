"""An example job handler: "resize" an image named in the body, with a flaky dependency.

Bodies are plain text:
* `photo.jpg`         succeeds after a short pause (0.2 s of pretend work);
* `flaky:photo.jpg`   fails with ConnectionError on its first attempt, succeeds on the retry
                      (the worker's retry policy picks the delay; the error lands in the
                      job's custom status);
* `bad:photo.jpg`     raises FailJob: FAILED at once, whatever attempts are left;
* `slow:N`            runs N seconds, checkpointing every second (its claim stays fresh even
                      if N is longer than the server's claim timeout).

Run it with the CLI:

    pinlater-worker --queue example --handler worker_sdk.examples.example_job:resize
"""

from __future__ import annotations

import logging
import time

from worker_sdk import FailJob, JobContext

log = logging.getLogger("example_job")


def resize(job: JobContext) -> str:
    """Returns a short status line that the worker appends to the job's custom status."""
    kind, _, name = job.body.decode("utf-8", "replace").rpartition(":")
    if kind == "bad":
        raise FailJob(f"{name}: not an image")
    if kind == "flaky" and job.attempt == 1:
        raise ConnectionError(f"image store timed out fetching {name}")
    if kind == "slow":
        for _ in range(int(name)):
            time.sleep(1)
            job.checkpoint()
        return f"slow job done after {name}s; "
    time.sleep(0.2)
    log.info("resized %s (attempt %d)", name, job.attempt)
    return f"resized {name}; "
