"""Small policy objects the ReAct loop consults: guards, context, interrupts, budget, control."""
