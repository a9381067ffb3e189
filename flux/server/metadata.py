"""gRPC metadata keys shared by the core and the gateway.

Plain constants, so the gateway can name them without importing the dispatcher.
"""

# How a worker's calls reached the core: "grpc", or "sse" when the gateway relays them.
TRANSPORT_METADATA = "x-flux-transport"

# Who a GetStatus caller's token speaks for, in the answer's trailing metadata: its tenant and
# role (the gateway answers them as the X-Flux-Tenant and X-Flux-Role headers of GET /status).
CALLER_TENANT = "x-flux-tenant"
CALLER_ROLE = "x-flux-role"
