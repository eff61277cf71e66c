"""The prefetching dequeue broker: partition buffers (`buffer`), hand-outs written behind
(`handouts`) and the broker that ties them to the sharded store (`broker`)."""
