"""The Thrift handler: one method per RPC (validate, convert, call the store, convert back),
the observer protocol it reports to, and the one error boundary to the wire."""
