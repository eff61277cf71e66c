"""The storage seam: the one part of pinlater that backends may import.

`contract` (Backend, Shard, ShardSpec, StorageLimits), `models` (the plain job models and
claims' shapes), `errors`, `specs` (shard-list parsing for backends), `descriptors`,
`claims`, the rules every backend applies the same way (`acks`: which acks one statement
applies; `paging`: body filters over bounded pages), and above the backends: `sharded`
(fan-out over shards) and `health`.
`shard_kit` is the shard contract as one suite of named checks that every backend's shard tests
run (`exercise`); it is test support, imported only by tests.
"""
