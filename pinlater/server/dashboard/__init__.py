"""The operator dashboard: server-rendered pages under /ui/ on the HTTP listener, over the
admin API's reads and actions (see app.py for its security, markup.py for escaping)."""

from pinlater.server.dashboard.app import Dashboard

__all__ = ["Dashboard"]
