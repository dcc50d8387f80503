"""Proxying: a request to its replicas with failover, streams resumed on another replica, the
hold queue, the upstream session, and serving under a path prefix."""
