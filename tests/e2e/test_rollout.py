"""Issue 35 on the emulated cluster: rollouts under steady streaming load. Three engine replicas
and two routers serve eight clients that stream long answers without pause; the LLMDeployment's
engine settings and then its model revision (other weights) change while they run. The emulated
Deployment controller rolls out as Kubernetes does (one surge pod, an old pod deleted once a new
one is ready: tests/e2e/rolling_update.py), the routers drop a deleted pod's endpoint before its
engine drains, and a new engine takes traffic once its router warmed it.

Checked: no request fails; every stream is whole (one id, [DONE]) and is exactly the greedy answer
of one revision (never a mix); every answer that starts after the routers see only new-revision
replicas is the new revision's; time to first token during the rollouts within 3x of the steady
state's, each phase's tail taken as the slowest of as many answers as the other timed
(tests/slowest_of.py: the slowest of more is slower by chance alone), the steady state timing
about as many as the rollouts. With a drain deadline shorter than the streams, the streams of a
draining engine are handed off and resumed on a new replica of the same weights (counted), not
cut.

NOTE: the revision is the model source (a second tiny model folder: other weights, the same
tokenizer and served name), since the emulated cluster has no Hugging Face Hub for `revision`.
The tiny random-weight llama keeps greedy answers exactly reproducible across batch mixes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster import LLMD, Cluster, eventually, get_json
from tests.e2e.controllers import template_hash
from tests.e2e.rollout_load import (
    Answer,
    Load,
    percentile,
    reference,
    timed_cleanly,
    ttfts,
)
from tests.slowest_of import slowest_of

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(1500)]
NAME = "rollout"
ENGINES = 3
CLIENTS = 8
MAX_TOKENS = 2000
MODEL_LEN = 4096
# The short-drain scenario's streams: twice as long (about 14 s here), so that each old engine
# still has streams when its drain deadline passes. An engine gets no new stream once its pod is
# deleted, and its deadline passes 6 s later (the 5 s preStop, the 1 s drain): 7 s streams were
# still running then only if one had started in the second before, and in 7 of 15 runs of
# 2000-token streams no stream was handed off at all.
LONG_MAX_TOKENS = 4000
STEADY_ANSWERS = 2 * CLIENTS
# The rollouts time 60 to 80 answers; the steady state about as many, so that their tails compare
# at the same depth (tests/slowest_of.py). Against 24, three rollout answers a second late failed
# the 3x bar in a quarter of bootstrap draws (of this machine's TTFTs), against 72 in 95 %.
TIMED_STEADY_ANSWERS = 8 * CLIENTS
RESUMED = 'pagedock_router_stream_resumes_total{outcome="resumed"}'


def make_revisions(folder: Path) -> tuple[str, str]:
    """Two revisions of a tiny model (other weights, same config shape and tokenizer)."""
    from tests.tiny_model import make_tiny_llama_dir

    first = make_tiny_llama_dir(folder / "rev-1", max_position_embeddings=MODEL_LEN)
    second = make_tiny_llama_dir(
        folder / "rev-2", max_position_embeddings=MODEL_LEN, initializer_range=0.21
    )
    for path in [folder, *folder.rglob("*")]:  # the pods run as user 10001
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return f"file://{first}", f"file://{second}"


def fleet(source: str, drain_s: int, gemm_dtype: str) -> Any:
    def edit(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["name"] = NAME
        spec = obj["spec"]
        spec["model"] = {"source": source, "name": "tiny"}
        spec["replicas"] = ENGINES
        spec["drainTimeoutSeconds"] = drain_s
        spec["router"] = {"replicas": 2}
        spec["engine"] = {"maxModelLen": MODEL_LEN, "maxNumSeqs": 16, "cpuGemmDtype": gemm_dtype}
        # One thread an engine: four engines (one a surge pod) and the routers share the cores.
        spec["env"] = [{"name": "PAGEDOCK_NUM_THREADS", "value": "1"}]
        return obj

    return edit


def ready_routers(cluster: Cluster) -> list[str]:
    """The router pods a Service would send a new request to: ready, not deleted."""
    return [r.ip for r in cluster.kubelet.pods(f"{NAME}-router-") if r.ready]


async def routers_see_only(cluster: Cluster, ips: set[str]) -> bool:
    """Every ready router routes to exactly these engines (healthy, warmed)."""
    routers = ready_routers(cluster)
    for router in routers:
        try:
            view = await get_json(router, 8080, "/router/replicas")
        except (aiohttp.ClientError, TimeoutError, AssertionError):
            return False  # just started or leaving: look again
        routable = [r for r in view["replicas"] if r["healthy"] and not r["warming"]]
        if {r["url"].split("//")[1].split(":")[0] for r in routable} != ips:
            return False
    return bool(routers)


def live(cluster: Cluster, resource: str, namespace: str, name: str) -> dict[str, Any]:
    obj = cluster.api.live(resource, namespace, name)
    assert obj is not None, f"no {resource} {namespace}/{name}"
    return obj


async def roll_out(cluster: Cluster, change: dict[str, Any]) -> float:
    """Patch the spec; wait until every engine pod is of the new template, ready, and the routers
    route to those only. Returns the monotonic time of that switch."""
    engines = ("apps/v1/deployments", "default", f"{NAME}-engine")
    old_template = template_hash(live(cluster, *engines))
    assert await cluster.client.patch(LLMD, "default", NAME, {"spec": change}) < 400

    async def switched() -> bool:
        current = template_hash(live(cluster, *engines))
        if current == old_template:
            return False  # the operator has not rendered the change yet
        pods = cluster.pod_objects("default", f"{NAME}-engine-")
        if len(pods) != ENGINES or any(
            p["metadata"]["labels"].get("pod-template-hash") != current for p in pods
        ):
            return False
        runners = cluster.kubelet.pods(f"{NAME}-engine-")
        ips = {r.ip for r in runners if r.ready}
        return len(ips) == ENGINES and await routers_see_only(cluster, ips)

    await eventually(switched, 600, f"rolled out {change}")
    return time.monotonic()


async def start_fleet(cluster: Cluster, source: str, drain_s: int, gemm_dtype: str = "auto") -> str:
    # NOTE: the engines' drain deadline runs in real seconds: so must the grace period.
    cluster.kubelet.lifecycle_time_scale = 1.0
    await cluster.apply_example(fleet(source, drain_s, gemm_dtype))
    await cluster.wait_ready("default", NAME, timeout=600)
    runners = cluster.kubelet.pods(f"{NAME}-engine-")
    await eventually(
        lambda: routers_see_only(cluster, {r.ip for r in runners}), 120, "routers see 3 engines"
    )
    await eventually(lambda: len(ready_routers(cluster)) == 2, 120, "two routers ready")
    return ready_routers(cluster)[0]


def start_load(cluster: Cluster, max_tokens: int = MAX_TOKENS) -> Load:
    """The clients, the routers' resumed streams counted while they run."""
    load = Load(lambda: ready_routers(cluster), CLIENTS, max_tokens, RESUMED)
    load.start()
    return load


async def steady_state(load: Load, answers: int = STEADY_ANSWERS) -> None:
    """`answers` answers (two a client by default) before anything changes: the steady state's
    figures."""
    await eventually(
        lambda: len([a for a in load.answers if not a.failed]) >= answers,
        600,
        lambda: f"{answers} steady answers, {len(load.answers)} so far",
    )


async def answered_after(load: Load, switch: float) -> None:
    """An answer a client started after the switch, finished."""
    await eventually(
        lambda: len(load.between(switch, 1e12)) >= CLIENTS, 600, f"{CLIENTS} answers after switch"
    )


def report(
    label: str, load: Load, steady: list[Answer], rolling: list[Answer]
) -> tuple[float, float, int]:
    """Print the phases' TTFT; return each phase's slowest of k, k the smaller phase's count
    (tests/slowest_of.py), and k, over the answers timed cleanly (no stall of the clients' loop
    within their wait), of which there must be at least half."""
    clean_steady, clean_rolling = (timed_cleanly(a, load.clients_lag) for a in (steady, rolling))
    quiet, busy = ttfts(clean_steady), ttfts(clean_rolling)
    k = min(len(quiet), len(busy))
    s_k, r_k = slowest_of(quiet, k), slowest_of(busy, k)
    lasted = percentile([a.seconds for a in steady + rolling], 0.5)
    print(
        f"{label}: TTFT steady p50 {percentile(quiet, 0.5) * 1000:.0f} ms p99 "
        f"{percentile(quiet, 0.99) * 1000:.0f} ms slowest of {k} {s_k * 1000:.0f} ms "
        f"({len(clean_steady)} of {len(steady)} answers timed cleanly); during the rollouts p50 "
        f"{percentile(busy, 0.5) * 1000:.0f} ms p99 {percentile(busy, 0.99) * 1000:.0f} ms "
        f"slowest of {k} {r_k * 1000:.0f} ms ({len(clean_rolling)} of {len(rolling)}); "
        f"slowest-of-{k} ratio {r_k / s_k:.2f} (p99 ratio "
        f"{percentile(busy, 0.99) / percentile(quiet, 0.99):.2f}); a stream lasted {lasted:.1f} s "
        f"(median); the clients' event loop was at most {load.clients_lag.worst_s * 1000:.0f} ms "
        f"late ({len(load.clients_lag.stalls)} stalls), the cluster's "
        f"{load.lag.worst_s * 1000:.0f} ms"
    )
    for clean, answers in ((clean_steady, steady), (clean_rolling, rolling)):
        assert 2 * len(clean) >= len(answers), "the clients' loop stalled too often to time"
    return s_k, r_k, k


def check_whole(answers: list[Answer]) -> None:
    failed = [a for a in answers if a.failed]
    assert not failed, [
        (a.status, a.error, a.done, a.text[-40:], a.router, a.replica, a.started, a.seconds)
        for a in failed[:5]
    ]
    assert all(len(a.ids) == 1 for a in answers), "a stream changed its id"


async def test_engine_settings_then_model_revision_roll_out_under_streaming_load(
    cluster: Cluster,
) -> None:
    started = time.monotonic()
    first, second = make_revisions(cluster.kubelet.workdir / "models")
    router = await start_fleet(cluster, first, drain_s=120)
    before = await reference(router, MAX_TOKENS)
    load = start_load(cluster)
    await steady_state(load, TIMED_STEADY_ANSWERS)
    rollout_start = time.monotonic()
    await roll_out(cluster, {"engine": {"maxModelLen": MODEL_LEN, "maxNumSeqs": 32}})
    switch = await roll_out(cluster, {"model": {"source": second, "name": "tiny"}})
    rollout_end = time.monotonic()
    await answered_after(load, switch)
    await load.stop()
    resumed = load.counter.total
    after = await reference(ready_routers(cluster)[0], MAX_TOKENS)

    answers = load.answers
    check_whole(answers)
    assert all(before[p] != after[p] for p in before), "the revisions answer alike"
    old = [a for a in answers if a.text == before[a.prompt]]
    new = [a for a in answers if a.text == after[a.prompt]]
    mixed = [a for a in answers if a not in old and a not in new]
    assert not mixed, [(a.prompt, a.text[:60]) for a in mixed[:3]]
    late_old = [a for a in old if a.started >= switch]
    assert not late_old, f"{len(late_old)} answers from the old revision after the switch"
    steady = load.between(started, rollout_start)
    rolling = load.between(rollout_start, rollout_end)
    s_k, r_k, k = report("rollout", load, steady, rolling)
    print(
        f"rollout: {len(answers)} requests, 0 failed; {len(old)} answers from revision 1, "
        f"{len(new)} from revision 2 ({len(load.between(switch, 1e12))} after the switch, all "
        f"revision 2); {resumed:.0f} streams resumed; rollouts took "
        f"{rollout_end - rollout_start:.0f} s, the scenario {time.monotonic() - started:.0f} s"
    )
    assert r_k <= 3 * s_k, (
        f"TTFT, the slowest of {k} answers: {r_k:.2f} s during the rollouts, {s_k:.2f} s steady"
    )


async def test_a_drain_deadline_shorter_than_the_streams_hands_them_off(cluster: Cluster) -> None:
    started = time.monotonic()
    first, _ = make_revisions(cluster.kubelet.workdir / "models")
    # NOTE: float32 GEMMs: a resumed stream's ids are prefilled where the uninterrupted one
    # decoded them, and over 4000 tokens bfloat16's rounding of the two told a near-tie of the
    # random weights apart (2 of 40 answers differed from about the 3,000th token on).
    router = await start_fleet(cluster, first, drain_s=1, gemm_dtype="float32")
    before = await reference(router, LONG_MAX_TOKENS)
    load = start_load(cluster, LONG_MAX_TOKENS)
    await steady_state(load)
    rollout_start = time.monotonic()
    await roll_out(cluster, {"engine": {"maxModelLen": MODEL_LEN, "maxNumSeqs": 32}})
    rollout_end = time.monotonic()
    await load.stop()
    resumed = load.counter.total

    answers = load.answers
    check_whole(answers)
    wrong = [a for a in answers if a.text != before[a.prompt]]
    assert not wrong, [(a.prompt, a.text[:60]) for a in wrong[:3]]
    report(
        "short drain",
        load,
        load.between(started, rollout_start),
        load.between(rollout_start, 1e12),
    )
    print(
        f"short drain (1 s): {len(answers)} requests, 0 failed, every answer as if uninterrupted; "
        f"{resumed:.0f} streams handed off and resumed; rollout took "
        f"{rollout_end - rollout_start:.0f} s, the scenario {time.monotonic() - started:.0f} s"
    )
    assert resumed >= 1
