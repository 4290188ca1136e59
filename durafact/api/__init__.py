"""The front door: an HTTP API and a web console over durafact runs (`durafact serve`).

from durafact.api import create_app
app = create_app(client, settings, registry, token=None)   # an ASGI app
"""

from durafact.api.app import create_app

__all__ = ["create_app"]
