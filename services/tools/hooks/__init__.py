"""PreToolUse / PostToolUse hooks: deterministic policy around every tool call."""
