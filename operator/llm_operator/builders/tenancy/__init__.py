"""Tenants (spec.tenancy) for the pods that read them: the router's, or the engines' when the
deployment has no router.

    config_map.py   the ConfigMap `<name>-tenants` holding the tenants file
    pod.py          the readers' projected volume, flags, and the hash that rolls them

    /etc/pagedock/tenants/          the projected volume `tenants`, read-only
        tenants.yaml                ConfigMap <name>-tenants (format: pagedock/tenancy/tenants.py)
        keys/<tenant>/<index>       the tenant's apiKeySecrets[index]: that Secret's key

The keys reach the pods only as files (`api_key_files`): the operator may not read Secrets, and
never does.
"""
