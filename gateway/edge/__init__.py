"""What stands between a caller and the routes: which Host is answered while auth is off, who
is calling (API key, stream ticket or the default tenant), how often they may call, how large
a body the gateway reads, and grpc-web, which serves browsers' calls to the allow-listed
shuttle.v1 methods without any route."""
