"""The `pinlater` operator tool: a client like any other, built on `worker_sdk.client`."""
