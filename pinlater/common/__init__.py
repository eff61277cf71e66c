"""Leaves shared by the server, the CLI and the worker SDK: ServerSet files, TLS contexts,
admin password hashes, typed settings sections and the ledger's counter names. They import
nothing else from pinlater."""
