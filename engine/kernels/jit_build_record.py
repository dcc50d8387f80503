"""A record of the kernel build torch's JIT builder made on this machine, so that a later start
imports that shared object directly.

torch's `cpp_extension.load` checks a build is up to date on every start even when it is: it
imports setuptools, asks the compiler and ninja for their versions, writes a build file and runs
ninja over it (0.2 to 1.7 s in single starts on a loaded 2-core VM, against 0.01 s for the
import alone; profiled, not a result file). After a successful load the engine writes a record
in the pagedock cache

    <cache_dir>/cpu_kernels/<build name>.json
        {"module": ..., "path": ..., "size": ..., "mtime_ns": ..., "key": ...}

and the next start with the same `key` (the build's name, which covers the sources, headers and
CPU, plus its compiler flags, torch's and Python's versions) imports the recorded file at once if
it is still the same file. Anything that does not match (an edited source, another torch, a
rebuilt or deleted object) goes through torch's builder as before, which writes a new record.
EngineConfig.cpu_kernels_cache (`--no-cpu-kernels-cache`) turns the shortcut off.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from pagedock.models.registry import cache_dir

logger = logging.getLogger("pagedock.cpu_kernels")


def build_key(name: str, cflags: list[str], ldflags: list[str], torch_version: str) -> str:
    """What a recorded build must match: its name and everything the name leaves out."""
    parts = [name, *cflags, "|", *ldflags, "|", torch_version, sys.version]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def record_path(name: str) -> Path:
    return cache_dir() / "cpu_kernels" / f"{name}.json"


def load_recorded(name: str, key: str) -> ModuleType | None:
    """The recorded build of `name`, imported; None when there is no record, it is for another
    key, its file changed or is gone, or it does not import."""
    try:
        record = json.loads(record_path(name).read_text())
        path = Path(record["path"])
        stat = path.stat()
        if record["key"] != key or (stat.st_size, stat.st_mtime_ns) != (
            record["size"],
            record["mtime_ns"],
        ):
            return None
        return _import_extension(record["module"], path)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as e:
        logger.debug("no usable record of the kernel build %s (%s)", name, e)
        return None


def write_record(name: str, key: str, module: ModuleType) -> None:
    """Record the build torch's builder just loaded (atomically; a failure only logs)."""
    tmp = None
    try:
        path = Path(str(module.__file__))
        stat = path.stat()
        record = {
            "module": module.__name__,
            "path": str(path),
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "key": key,
        }
        target = record_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, target)
    except (OSError, TypeError) as e:  # a read-only cache: the next start checks the build again
        logger.debug("cannot record the kernel build %s (%s)", name, e)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _import_extension(module_name: str, path: Path) -> ModuleType:
    """Import a compiled extension module from its file (torch must be imported already: the
    module resolves its symbols against the loaded libtorch)."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an importable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module
    return module
