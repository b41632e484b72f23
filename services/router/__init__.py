"""The router: the service broker every client talks to, and the process the memory API runs in."""

from keymem.services.router.broker import ROUTER_SERVICE, Broker

__all__ = ["ROUTER_SERVICE", "Broker"]
