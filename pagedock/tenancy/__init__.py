"""Tenants, their quotas and fair shares: the torch-free bookkeeping the router's flow control
and the engine's scheduler both use (docs/tenants.md).

    tenants.py       the tenants file (`--tenants FILE`): who a request belongs to, its priority
    rate_bucket.py   a per-minute limit as a continuously refilled bucket
    quota.py         a tenant's requests/tokens per minute and concurrency, with OpenAI's
                     x-ratelimit-* headers
    fair_share.py    virtual token counters: which backlogged tenant has been served least
"""
