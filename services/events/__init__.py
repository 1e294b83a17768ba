"""The events service: each workflow's ordered, replayable event log (shuttle.v1.EventService).

``EventLog`` (log.py) is the domain core over ``SqlEventStore`` (store.py, durable tier) and a
``HotTier`` (hot.py, recent events and live wake-ups); grpc_api.py is the thin adapter (wire.py
encodes each streamed event once, grpc_registration.py puts the service on a server) and
``python -m services.events`` runs the server.
"""
