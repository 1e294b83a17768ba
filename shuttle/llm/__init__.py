"""The LLM port and its providers: any OpenAI-compatible endpoint, or the offline demo model."""
