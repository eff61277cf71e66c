"""The one check before a new shard map drops a shard: would the drop lose unfinished jobs?

A shard may leave the map when it was draining (dequeue_only in the map in force) and holds no
unfinished job: counted now when it is healthy, or, when it is down, known from the last drain
count taken under that same spec (a shard that died once drained is removed without being
asked anything). A shard still taking enqueues is never dropped directly (a job could land on
it between the count and the switch): set `dequeue_only: true` first. The operator overrides
all of this per shard with `retired_with_jobs: true`.
"""

from __future__ import annotations

from pinlater.common.sections import ConfigError
from pinlater.ops.drain import DrainProgress
from pinlater.storage.contract import ShardSpec
from pinlater.storage.shard_map import RETIRED_KEY, ShardMap
from pinlater.storage.sharded import ShardedBackend


class RetireRefused(ConfigError):
    """The new map drops shards that may hold unfinished jobs; `shards` names them."""

    def __init__(self, problems: list[str], shards: list[str]):
        super().__init__(problems)
        self.shards = shards


class RetireGuard:
    def __init__(self, store: ShardedBackend, drain: DrainProgress):
        self.store = store
        self.drain = drain

    def check(self, new: ShardMap) -> None:
        """Raise RetireRefused unless every shard that `new` drops is safe to drop."""
        live = set(new.names()) | new.retired
        problems: list[str] = []
        refused: list[str] = []
        for spec in self.store.shard_specs():
            if spec.name in live:
                continue
            problem = self._blocker(spec)
            if problem is not None:
                problems.append(problem)
                refused.append(spec.name)
        if problems:
            raise RetireRefused(problems, refused)

    def _blocker(self, spec: ShardSpec) -> str | None:
        """Why dropping this shard could lose jobs, or None when it cannot."""
        name = spec.name
        override = f"or mark it {RETIRED_KEY}: true to drop it with what it holds"
        if not self.store.health.is_healthy(name):
            last = self.drain.get(name)
            if spec.dequeue_only and last is not None and last.spec == spec and not last.total:
                return None
            return (
                f"shard {name} is down and was not seen drained: bring it back to finish the "
                f"drain, {override}"
            )
        if not spec.dequeue_only:
            return (
                f"shard {name} still takes enqueues: set dequeue_only: true, let it drain, "
                f"then remove it ({override})"
            )
        count = self.drain.count(spec)
        if count is None:
            return f"shard {name} did not answer the count of its jobs ({override})"
        if count.total:
            held = ", ".join(f"{queue}: {n}" for queue, n in sorted(count.jobs.items()))
            return (
                f"shard {name} still holds {count.total} unfinished job(s) ({held}); let it "
                f"drain ({override})"
            )
        return None
