"""Remote tool providers: ToolProvider gRPC servers and MCP servers join the catalog."""
