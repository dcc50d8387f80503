"""The built-in autoscaler (autoscaling.mode builtin): the routers' demand in, spec.replicas out.

rule.py      the pure decision (stable and panic windows, scale-up limit, stabilization, zero)
signals.py   reading and summing every router pod's GET /router/demand
scale_down.py  which engine pod goes first (pod-deletion-cost from the routers' prefix hits)
loop.py      the operator-wide task that polls, decides, patches, records status and Events
record.py    the rule's windows as a record on the wall clock, and when a record is stale
state_store.py  that record in the ConfigMap `<name>-autoscaler`, so a restart resumes the windows
"""
