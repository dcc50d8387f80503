"""What the fleet is doing: the status conditions from the children's state, pod failures, the
Gateway's state, and the engines' metrics summed."""
