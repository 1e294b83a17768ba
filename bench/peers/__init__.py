"""What Shuttle is measured beside: the same work done without Shuttle's code.

Each peer does what one part of Shuttle does with as little as the work allows (bare
grpc.aio servers, a bare SSE server, bare model loops), so the difference a benchmark shows
is what Shuttle's own code costs. A peer that is a few lines of one benchmark stays there.
"""
