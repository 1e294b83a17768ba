"""The ReAct engine: one short loop shared by native and JSON modes, driving small policies."""
