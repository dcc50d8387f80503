"""Peak memory of a process and every process it spawns, sampled the same way for every system.

One sampler watches the whole tree (the root and its children, recursively) from spawn to exit:
the peak of the summed RSS every 0.1 s, and the peak of the summed PSS (proportional set size: a
page shared by N processes counts 1/N to each, so shared libraries and shared memory are not
counted twice, as RSS counts them) every 1 s. A system that forks workers (vLLM's engine core)
and one that runs in one process are measured alike.

NOTE: reading PSS makes the kernel walk every page of the process (~50 ms of CPU for a 4 GB
process here), so sampling it every 0.1 s would take ~half a core from the system measured on a
2-core machine; RSS costs microseconds. The sampler's own CPU time is recorded beside its figures.
"""

from __future__ import annotations

import threading
import time

import psutil


class TreeMemorySampler:
    """Samples the process tree of `pid` on a thread until `stop()` or until the root exits."""

    def __init__(self, pid: int, interval_s: float = 0.1, pss_interval_s: float = 1.0) -> None:
        self.peak_pss_bytes = 0
        self.peak_rss_bytes = 0
        self.num_samples = 0
        self.num_pss_samples = 0
        self.cpu_s = 0.0
        """CPU time the sampling itself took (it shares the machine with what it measures)."""
        self._root = psutil.Process(pid)
        self._interval_s = interval_s
        self._pss_interval_s = pss_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> TreeMemorySampler:
        self._stop.set()
        self._thread.join()
        return self

    def as_dict(self) -> dict[str, float | int]:
        return {
            "peak_pss_mb": self.peak_pss_bytes / 1e6,
            "peak_rss_mb": self.peak_rss_bytes / 1e6,
            "memory_samples": self.num_samples,
            "pss_samples": self.num_pss_samples,
            "memory_sampler_cpu_s": self.cpu_s,
        }

    def _run(self) -> None:
        next_pss = 0.0
        while not self._stop.is_set():
            started = time.thread_time()
            with_pss = time.monotonic() >= next_pss
            alive = self._sample_once(with_pss)
            self.cpu_s += time.thread_time() - started
            if not alive:
                return  # the root exited: nothing is left to sample
            if with_pss:
                next_pss = time.monotonic() + self._pss_interval_s
            self._stop.wait(self._interval_s)

    def _sample_once(self, with_pss: bool) -> bool:
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return False
        pss = rss = 0
        for proc in procs:
            try:
                info = proc.memory_full_info() if with_pss else proc.memory_info()
            except psutil.Error:
                continue  # a child that exited between listing and reading
            pss += getattr(info, "pss", 0)
            rss += info.rss
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        self.num_samples += 1
        if with_pss:
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)
            self.num_pss_samples += 1
        return True


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process tree so far (exited children not counted)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total
