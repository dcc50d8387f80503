"""The control loop: kopf handlers, reconciliation, the drift-repair pass, model delivery, and
`pagedock operator`."""
