"""The HTTP API: app factory, thin routers per resource, problem+json errors."""
