"""What stands between a caller and the routes: who is calling (API key, stream ticket or
the default tenant), how often they may call, how large a body the gateway reads, and
grpc-web, which carries browsers' gRPC calls to the backends without any route."""
