"""What the benchmarks share: the scripted model, the stacks they start, results recording,
meters of CPU and memory, producers and SSE clients."""
