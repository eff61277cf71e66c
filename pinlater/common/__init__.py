"""Leaves shared by the server, the CLI and the worker SDK: ServerSet files, TLS contexts,
admin password hashes and typed settings sections. They import nothing else from pinlater."""
