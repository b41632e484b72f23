"""The router: the service broker every client talks to (and, later, recall orchestration)."""

from services.router.broker import ROUTER_SERVICE, Broker

__all__ = ["ROUTER_SERVICE", "Broker"]
