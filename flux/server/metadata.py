"""gRPC metadata keys shared by the core and the gateway.

Plain constants, so the gateway can name them without importing the dispatcher.
"""

# How a worker's calls reached the core: "grpc", or "sse" when the gateway relays them.
TRANSPORT_METADATA = "x-flux-transport"
