"""The events service's client, shared by every component that writes or reads a log."""

from shuttle.events_client.client import EventsClient
from shuttle.events_client.follow import Upstream, UpstreamError
from shuttle.events_client.producer import Producer

__all__ = ["EventsClient", "Producer", "Upstream", "UpstreamError"]
