"""Proxying: a request's body parsed and hashed, the request sent to its replicas with failover,
streams resumed on another replica, the hold queue, the upstream session, and serving under a
path prefix."""
