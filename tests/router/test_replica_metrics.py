"""parse_replica_load: a replica's load from its Prometheus text."""

from __future__ import annotations

from router.replicas.replica_metrics import parse_replica_load

TEXT = """\
# HELP vllm:num_requests_running Requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="tiny"} 3.0
vllm:num_requests_waiting{model_name="tiny"} 2.0
vllm:kv_cache_usage_perc{model_name="tiny"} 0.25
vllm:prefix_cache_hits_total{model_name="tiny"} 160.0
vllm:prefix_cache_hits_created{model_name="tiny"} 1.7e+09
vllm:prefix_cache_queries_total{model_name="tiny"} 320.0
"""


def test_reads_the_vllm_load_gauges_and_prefix_counters() -> None:
    load, _ = parse_replica_load(TEXT)
    assert (load.num_requests_running, load.num_requests_waiting, load.kv_cache_usage) == (
        3,
        2,
        0.25,
    )
    assert (load.prefix_cache_hits, load.prefix_cache_queries) == (160, 320)


def test_missing_or_garbled_samples_read_as_zero() -> None:
    load, _ = parse_replica_load('vllm:num_requests_running{a="b"} nan-ish\nother 5\n')
    assert load.num_requests_running == 0 and load.num_requests_waiting == 0


def test_nan_infinite_and_negative_values_are_ignored_and_reported() -> None:
    text = (
        'vllm:num_requests_running{a="1"} +Inf\n'
        'vllm:num_requests_running{a="2"} 2\n'
        "vllm:num_requests_waiting NaN\n"
        "vllm:kv_cache_usage_perc -Inf\n"
        "vllm:prefix_cache_hits_total -3\n"
    )
    load, rejected = parse_replica_load(text)
    assert (
        load.num_requests_running,
        load.num_requests_waiting,
        load.kv_cache_usage,
        load.prefix_cache_hits,
    ) == (2, 0, 0, 0)
    assert len(rejected) == 4


def test_the_newest_lora_requests_info_names_the_resident_adapters() -> None:
    text = (
        "# TYPE vllm:lora_requests_info gauge\n"
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="old",'
        'waiting_lora_adapters=""} 1.7e9\n'
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",'
        'waiting_lora_adapters="poems"} 1.8e9\n'
        'vllm:num_requests_running{model_name="tiny"} 1.0\n'
    )
    load, _ = parse_replica_load(text)
    assert load.max_lora == 4
    assert load.running_lora_adapters == ("sql", "chat")
    assert load.waiting_lora_adapters == ("poems",)
    assert load.num_requests_running == 1


def test_no_lora_requests_info_leaves_residency_unknown() -> None:
    load, _ = parse_replica_load(TEXT)
    assert load.running_lora_adapters is None
    empty, _ = parse_replica_load(
        'vllm:lora_requests_info{max_lora="0",running_lora_adapters="",'
        'waiting_lora_adapters=""} 1.7e9\n'
    )
    assert (empty.max_lora, empty.running_lora_adapters) == (0, ())


def test_reads_the_kv_pool_size_from_the_cache_config_info_labels() -> None:
    text = (
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="600",'
        'enable_prefix_caching="True",engine="0"} 1.0\n'
    )
    assert parse_replica_load(text)[0].num_gpu_blocks == 600
    assert parse_replica_load(TEXT)[0].num_gpu_blocks == 0
