"""The storage seam: the one part of pinlater that backends may import.

`contract` (Backend, Shard, ShardSpec, StorageLimits), `models` (the plain job models and
claims' shapes), `errors`, `specs` (shard-list parsing for backends), `descriptors`,
`claims`, and above the backends: `sharded` (fan-out over shards) and `health`.
"""
