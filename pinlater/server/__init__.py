"""The network side: the selector thread (accept, connection limits, idle and slow
connections), the connection thread pool, framing, the wire check, TLS handshakes, admission
caps and the HTTP endpoint (metrics, health)."""
