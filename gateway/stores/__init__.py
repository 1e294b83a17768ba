"""What the gateway keeps in the shared SQL database: its tables, the API keys, the tasks
submitted through it (listing and Idempotency-Key), and the sessions with their turns. Each
store is plain SQLAlchemy over an async engine and knows nothing of HTTP or gRPC."""
