"""OpenTelemetry traces for the engine and the router: off unless an OTLP endpoint is named,
and then without importing OpenTelemetry until it is."""
