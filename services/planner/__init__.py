"""The planner: structured LLM calls, tool selection, DAG plans, plan analysis, routing."""
