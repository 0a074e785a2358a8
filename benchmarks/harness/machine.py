"""What ran a benchmark, for its page: the CPU's (or GPU's) name, the cores, torch_mp.cpu_features(), nvidia-smi's
facts, the checkout's commit; and how busy other processes kept the CPUs meanwhile (the machines are shared, so a
page says so next to its times)."""
import os
import platform
import resource
import subprocess
import time
from dataclasses import dataclass
from typing import List, Optional

import torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_smi(fields: str) -> Optional[str]:
    """nvidia-smi's first GPU's `fields` (its --query-gpu names, comma-separated) as one CSV line; None without it."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def git_commit(folder: str) -> Optional[str]:
    """The short commit of the checkout at `folder`, with '+dirty' where tracked files changed; None outside git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10)
    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


@dataclass(frozen=True)
class Machine:
    name: str  # the GPU's on cuda, else the CPU's
    cores: int
    cpu_features: List[str]  # torch_mp.cpu_features(): the low-precision kernels the plans count on

    @staticmethod
    def this(device: str = "cpu") -> "Machine":
        import torch_mp

        name = torch.cuda.get_device_name() if device == "cuda" else cpu_name()
        return Machine(name, os.cpu_count() or 1, list(torch_mp.cpu_features()))

    def describe(self) -> str:
        features = ", ".join(self.cpu_features) or "none"
        return f"{self.name}, {self.cores} CPU cores (cpu_features: {features})"


def _busy_cpu_seconds() -> "tuple[float, float]":
    """CPU seconds spent busy since boot by all processes (/proc/stat), and by this one and its children."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in stat.readline().split()[1:9])
    everyone = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return everyone, sum(u.ru_utime + u.ru_stime for u in usage)


class NeighbourLoad:
    """Cores other processes kept busy on average from construction to `cores_busy()` (Linux only)."""

    def __init__(self):
        self.start = time.perf_counter()
        self.everyone, self.own = _busy_cpu_seconds()

    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def cores_busy(self) -> float:
        everyone, own = _busy_cpu_seconds()
        return ((everyone - self.everyone) - (own - self.own)) / self.seconds()
