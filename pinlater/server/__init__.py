"""The network side: accept loop and connections, framing, the wire check, TLS handshakes,
admission caps and the HTTP endpoint (metrics, health)."""
