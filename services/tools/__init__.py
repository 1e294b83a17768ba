"""The tool host (shuttle.v1.ToolService): the catalog of built-in and remote tools, execution
behind the hook chain, approvals and the audit log."""
