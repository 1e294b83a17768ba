"""The tool host: catalog, execution (behind hooks, later) and approvals (later)."""
