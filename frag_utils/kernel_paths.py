"""The CPU kernel path a run computes on, taken from the records it extends.

A record names the path that made it (``provenance.environment.cpu_capability``: ``AVX2``, ``AVX512``). The same
code on another path trains other weights (the smol target: forget ES 0.95 with AVX2 kernels, 0.89 with AVX-512's;
docs/reproducibility.md). So a job that remakes or extends recorded runs computes on their path where this CPU can
take it: an AVX-512 CPU takes the AVX2 path under the three caps of :data:`CAPS` (set before torch loads, so they are
given to the job's process, never switched inside one). Nothing here imports torch: the runner plans with it.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .paths import KERNELS_ENV  # a process on a capped path keeps its cache in a folder of its own

# a record's path -> the caps that give it to a CPU with more (an AMD AVX-512 CPU gives the AVX2 bits; an Intel
# one lands within tolerance, as MKL runs other code there: docs/verify/intel_xeon.md)
CAPS = {"AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
# every variable that caps a kernel path (frag_utils.cache.KERNEL_CAPS and ATen's), replaced as a whole
ALL_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
# what each path needs of the CPU: a path is available where every flag is present
NEEDS = {"AVX2": ("avx2", "fma"), "AVX512": ("avx512f", "avx512bw", "avx512vl", "avx512dq")}
MODES = ("records", "native")  # the runner's --kernels: the records' path (default), or this CPU's own


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's flags as Linux lists them (``/proc/cpuinfo``); empty where the machine does not tell."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    return next((set(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines() if line.startswith("flags")),
                set())


def native(flags: set[str] | None = None, machine: str | None = None) -> str:
    """This CPU's own path, as torch names it: ``AVX512``, ``AVX2``, ``DEFAULT``; another architecture by name."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return machine.upper()
    flags = cpu_flags() if flags is None else flags
    return next((path for path in ("AVX512", "AVX2") if set(NEEDS[path]) <= flags), "DEFAULT")


def of_records(records: Iterable[dict]) -> set[str]:
    """The paths that made ``records`` (their provenance), those computed on a CPU only; an ARM record by its
    machine's name, as :func:`native` names an ARM CPU's."""
    paths = set()
    for rec in records:
        env = rec.get("provenance", {}).get("environment", {})
        if env.get("device", "cpu") == "cpu" and env.get("cpu_capability"):
            machine = next((m for m in ("aarch64", "arm64") if m in str(env.get("platform", "")).lower()), None)
            paths.add(machine.upper() if machine else str(env["cpu_capability"]).upper())  # as native() names it
    return paths


@dataclass(frozen=True)
class Choice:
    """The path a job computes on: ``path`` (its name), the ``caps`` its process is given, and the ``line`` the
    plan prints (``kernels: AVX2, as the records``)."""

    path: str
    caps: dict
    line: str
    flag: str = ""  # what the job's process is given (run-one --kernels): "" keeps the environment as it stands


def choose(wanted: set[str], mode: str = "records", here: str | None = None, whose: str = "the records") -> Choice:
    """The path of a job that extends records made on ``wanted`` paths, on this CPU (``here``: its own path).

    The records' path where this CPU takes it (its own, or one of :data:`CAPS` below it); this CPU's own where
    ``mode`` is ``native``, where the records name no path or several, or where this CPU cannot take theirs (an
    AVX-512 record on an AVX2 CPU, an x86 record on ARM), with a line that says which (``whose`` the paths are:
    the records', or a run's own parameter).

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in MODES:
        raise ValueError(f"--kernels must be one of {MODES}, got {mode!r}")
    here = native() if here is None else here
    if mode == "native":
        return Choice(here, {}, f"kernels: {here}, this CPU's own (--kernels native)")
    if not wanted:
        return Choice(here, {}, f"kernels: {here}, this CPU's own (no record names a path)", here)
    if len(wanted) > 1:
        return Choice(here, {}, f"kernels: {here}, this CPU's own (the records name several paths: "
                                f"{', '.join(sorted(wanted))})", here)
    (path,) = wanted
    if path == here:
        return Choice(here, {}, f"kernels: {here}, as {whose}", here)
    if path in CAPS and here == "AVX512":  # an AVX-512 CPU takes the AVX2 path under the caps
        return Choice(path, dict(CAPS[path]), f"kernels: {path}, as {whose}, by the caps "
                                              f"{' '.join(f'{k}={v}' for k, v in CAPS[path].items())}", path)
    return Choice(here, {}, f"kernels: {here}, this CPU's own: the {path} path of {whose} is not available here, "
                            f"so their drift tables compare {here} against {path}", here)




def environment(caps: dict, environ: dict | None = None) -> dict:
    """``environ`` (default ``os.environ``) with every cap of :data:`ALL_CAPS` replaced by ``caps``."""
    environ = {k: v for k, v in (os.environ if environ is None else environ).items() if k not in ALL_CAPS}
    return {**environ, **caps}


def applied(caps: dict, environ: dict | None = None) -> bool:
    """Whether ``environ`` (default ``os.environ``) holds exactly ``caps`` of every cap of :data:`ALL_CAPS`."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in ALL_CAPS if k in environ} == caps


def on_path(path: str, environ: dict | None = None) -> dict:
    """The environment of a process on kernel ``path``: its caps (:data:`CAPS`; none for a CPU's own path) and no
    other, and, where capped, :data:`KERNELS_ENV` naming it, which gives it a cache folder of its own."""
    environ = {k: v for k, v in environment(CAPS.get(path, {}), environ).items() if k != KERNELS_ENV}
    return {**environ, **({KERNELS_ENV: path} if path in CAPS else {})}


def is_on(path: str, environ: dict | None = None) -> bool:
    """Whether ``environ`` (default ``os.environ``) is :func:`on_path`'s for ``path``: its caps and cache."""
    environ = os.environ if environ is None else environ
    return applied(CAPS.get(path, {}), environ) and environ.get(KERNELS_ENV, "") == (path if path in CAPS else "")


def check(path: str) -> str:
    """``path`` as a job is given it (``--kernels``), upper case; a name that is no path is refused.

    Raises:
        ValueError: not a path this module knows or this CPU's own.
    """
    known = {*CAPS, *NEEDS, "DEFAULT", native()}
    if path.upper() not in known:
        raise ValueError(f"--kernels {path}: not a kernel path; use one of {', '.join(sorted(known))} (the plan "
                         "names each job's), or leave it out to keep the environment as it stands")
    return path.upper()
