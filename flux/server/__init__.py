"""The control plane's gRPC edge: servicers, conversions, and the serve loop."""
