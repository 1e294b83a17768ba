"""The HTTP/SSE edge: users and browsers meet Shuttle here."""
