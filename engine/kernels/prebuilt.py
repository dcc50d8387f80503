"""The C++ CPU kernels prebuilt for a few x86-64 levels, and the choice among them at load.

An image cannot JIT-build the kernels the way a dev machine does: a pod has a read-only root and
no compiler, and the build machine's CPU is not the node's, so `-march=native` would be wrong
anyway. The image build compiles one shared object per x86-64 psABI level instead

    x86-64-v4  AVX-512 (F, BW, CD, DQ, VL)
    x86-64-v3  AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE
    x86-64     the baseline every x86-64 CPU runs

and the engine loads the highest level whose instructions /proc/cpuinfo lists
(`python -m engine.kernels.prebuilt DIR` builds them; PAGEDOCK_CPU_KERNELS_DIR=DIR uses them).
Why levels and not the toolchain in the image: a compiler adds ~200 MB and a first-start build of
~30 s per pod, and needs a writable, per-CPU cache; three builds cost ~2 MB.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

CSRC = Path(__file__).parent / "csrc"
KERNEL_LDFLAGS = ["-fopenmp"]


def kernel_cflags(march: str) -> list[str]:
    """The compiler flags of every build, JIT (`native`) or prebuilt (a level)."""
    # -ffast-math lets GCC vectorise the kernels' float reductions (sums, maxima) and contract
    # a * b + c into FMAs; the kernels keep no infinities around (the running max starts at
    # -FLT_MAX, e^x is clamped: fast_exp.h), and where a NaN must survive they tell it by its
    # bits, which -ffast-math cannot fold away, so it is safe.
    # GCC 12 warns of maybe-uninitialised use inside its own AVX-512 intrinsics (their
    # `_mm512_undefined_ps()` operand), once per instantiation: noise, not a finding.
    return ["-O3", f"-march={march}", "-fopenmp", "-ffast-math", "-Wno-maybe-uninitialized"]


def kernel_sources() -> list[Path]:
    return sorted(CSRC.glob("*.cpp"))


@dataclass(frozen=True)
class KernelVariant:
    """One prebuilt build of the kernels: a GCC `-march` level and the CPU flags it needs."""

    march: str
    required_flags: frozenset[str]
    """/proc/cpuinfo flag names; all must be present for the CPU to run this build."""

    @property
    def module_name(self) -> str:
        return "pagedock_cpu_" + self.march.replace("-", "_")


_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
# "abm" is how Linux names LZCNT.
_V3 = _V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

# Best first; the last one runs everywhere.
VARIANTS = (
    KernelVariant("x86-64-v4", _V4),
    KernelVariant("x86-64-v3", _V3),
    KernelVariant("x86-64", frozenset()),
)


def choose_variant(cpu_flags: set[str] | frozenset[str]) -> KernelVariant:
    """The fastest variant this CPU can run (the baseline when it lacks v3's instructions)."""
    return next(v for v in VARIANTS if v.required_flags <= cpu_flags)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's feature flags; empty when they cannot be read (the baseline is chosen)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def find_variant_file(directory: Path, variant: KernelVariant) -> Path | None:
    """The shared object of `variant` in `directory`, if it was built there."""
    found = sorted(directory.glob(f"{variant.module_name}.*.so"))
    return found[0] if found else None


def load_prebuilt(directory: Path, flags: frozenset[str]) -> tuple[ModuleType, KernelVariant]:
    """Import the variant of the kernels this CPU should run from `directory`.

    Raises ImportError (or OSError) when that variant is missing or does not load; the caller
    falls back. NOTE: torch must be imported first: the module resolves its symbols against the
    libtorch that `import torch` already loaded, as JIT-built ones do.
    """
    variant = choose_variant(flags)
    path = find_variant_file(directory, variant)
    if path is None:
        raise ImportError(f"no {variant.module_name} build in {directory}")
    spec = importlib.util.spec_from_file_location(
        variant.module_name,
        path,
        loader=importlib.machinery.ExtensionFileLoader(variant.module_name, str(path)),
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an importable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, variant


def build_variants(out_dir: Path) -> list[Path]:
    """Compile every variant into `out_dir` (at image build; needs g++ and Python's headers).

    Each variant builds in its own temp folder: the sources are shared, and a shared object
    folder would let one variant's objects pass for another's.
    """
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    out_dir.mkdir(parents=True, exist_ok=True)
    for variant in VARIANTS:
        extension = CppExtension(
            variant.module_name,
            sources=[str(s) for s in kernel_sources()],
            extra_compile_args=kernel_cflags(variant.march),
            extra_link_args=KERNEL_LDFLAGS,
        )
        with tempfile.TemporaryDirectory(prefix="pagedock-kernels-") as tmp:
            setup(
                name=variant.module_name,
                ext_modules=[extension],
                cmdclass={"build_ext": BuildExtension},
                script_args=["-q", "build_ext", "--build-lib", str(out_dir), "--build-temp", tmp],
            )
    built = [find_variant_file(out_dir, v) for v in VARIANTS]
    missing = [v.march for v, path in zip(VARIANTS, built, strict=True) if path is None]
    if missing:
        raise RuntimeError(f"kernel variants not built: {', '.join(missing)}")
    return [p for p in built if p is not None]


if __name__ == "__main__":
    for built_path in build_variants(Path(sys.argv[1])):
        print(built_path)
