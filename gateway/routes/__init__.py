"""The HTTP API, one module per route family: tasks, sessions, control (commands and
approvals), the SSE streams with their tickets, the ReAct channel dialect they can speak,
and the OpenAI-compatible face. Beside them: the dependencies and helpers every family
shares, the JSON response class, and the OpenAPI document as it is published."""
