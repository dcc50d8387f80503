"""The process-tree memory sampler and CPU account, against real child processes."""

import subprocess
import sys
import time

from benchmarks.process_memory import TreeMemorySampler, tree_cpu_seconds

MB = 1_000_000
# A child that starts a grandchild holding 150 MB of touched pages, then waits for it.
TREE = (
    "import subprocess, sys\n"
    "hold = \"b = bytearray(b'\\\\x01') * 150_000_000; import time; time.sleep(4)\"\n"
    "subprocess.run([sys.executable, '-c', hold], check=True)\n"
)
# Uses 0.3 s of CPU, then sleeps.
SPIN = (
    "import time\n"
    "while time.process_time() < 0.3: pass\n"
    "print('spun', flush=True)\n"
    "time.sleep(30)\n"
)


def test_the_peak_counts_a_grandchild_from_spawn_to_exit() -> None:
    process = subprocess.Popen([sys.executable, "-c", TREE])
    sampler = TreeMemorySampler(process.pid)
    assert process.wait(timeout=120) == 0
    sampler.stop()
    assert sampler.num_samples > 0
    assert sampler.peak_pss_bytes >= 150 * MB
    assert sampler.peak_rss_bytes >= sampler.peak_pss_bytes
    figures = sampler.as_dict()
    assert figures["peak_pss_mb"] >= 150 and figures["peak_rss_mb"] >= figures["peak_pss_mb"]


def test_the_sampler_stops_by_itself_when_the_process_is_gone() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler = TreeMemorySampler(process.pid)
    process.wait(timeout=60)
    deadline = time.monotonic() + 60
    while sampler._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sampler._thread.is_alive()
    sampler.stop()


def test_tree_cpu_seconds_counts_what_a_live_child_has_used() -> None:
    process = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "spun"
        assert tree_cpu_seconds(process.pid) >= 0.25  # the kernel counts in ticks
    finally:
        process.kill()
        process.wait()
    assert tree_cpu_seconds(process.pid) == 0.0  # gone: nothing left to count
