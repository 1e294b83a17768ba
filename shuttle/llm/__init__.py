"""The LLM port and its providers: any OpenAI-compatible endpoint, or the offline demo model."""

from shuttle.llm.protocol import LLM, ChatResult, ChatStream, TokenUsage, ToolCallRequest

__all__ = ["LLM", "ChatResult", "ChatStream", "TokenUsage", "ToolCallRequest"]
