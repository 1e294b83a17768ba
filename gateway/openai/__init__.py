"""OpenAI's shapes for Shuttle's runs, free of HTTP."""
