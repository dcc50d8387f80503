"""The router as the Gateway API Inference Extension's endpoint picker: Envoy's ext_proc
messages, the picker, and its gRPC server."""
