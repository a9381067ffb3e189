"""The Flux gateway: workers and clients over HTTP and Server-Sent Events, in front of the gRPC core."""

from gateway.app import GatewaySettings, create_app
from gateway.server import RunningGateway, start_gateway

__all__ = ["GatewaySettings", "RunningGateway", "create_app", "start_gateway"]
