"""The HTTP/SSE face of Shuttle: users, browsers and OpenAI clients meet it here.

`routes/` is the HTTP API, one module per route family; `edge/` is what a request passes
before any route (who is calling, rate and body limits) and grpc-web; `stores/` is what the
gateway keeps in SQL. At the root: the app's wiring (`app.py`), the backends' clients, the
errors every layer raises, and what the routes do beyond HTTP: starting a task
(`submit.py`), sessions across services (`conversations.py`), one shared follow of each
log for every SSE client (`fanout.py`), and the API's names for workflow statuses.
"""
