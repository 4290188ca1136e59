"""The front door: an HTTP API and a web console over durafact runs (`durafact serve`).

from durafact._api import create_app
app = create_app(client, settings, registry, token=None)   # an ASGI app
"""

from durafact._api.app import create_app

__all__ = ["create_app"]
