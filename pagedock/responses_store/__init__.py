"""Stored Responses API responses (`store: true`), what a follow-up's `previous_response_id`
rebuilds its conversation from: torch-free, so the router can read the same store.

    stored_response.py   StoredResponse: one response, its tenant, its input and its history
    store.py             ResponsesStore, the interface; open_responses_store() picks one by URL
    memory_store.py      in this process, bounded by count (LRU): the single-process default
    redis_store.py       in Redis, shared by a fleet (redis-py, imported only when used)

A response belongs to the tenant that created it: every lookup is by (tenant, id), so another
tenant's id is simply not there.
"""
