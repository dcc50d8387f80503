"""What the fleet is doing: the status and its conditions, pod failures, the Gateway's state, and
the engines' metrics summed."""
