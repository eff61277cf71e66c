"""Operating the server: background duties on the storage seam (janitor, queue depth, shard
maintenance), metrics, rate limits, per-queue settings and request logs."""
