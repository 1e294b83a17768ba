"""The workflow log spoken as AG-UI (the Agent-User Interaction protocol)."""
