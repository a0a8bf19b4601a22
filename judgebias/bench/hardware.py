"""What this machine is and how much of it a run used: the device's name, its peak TFLOP/s (measured
on a CPU, the vendor's figure on a GPU) and peak memory, of this process or of a local server."""

from __future__ import annotations

import contextlib
import math
import platform
import time
from pathlib import Path

# Dense bf16 tensor-core peaks (vendor data sheets, TFLOP/s, no sparsity). torch names the SXM
# H100 "NVIDIA H100 80GB HBM3", the others "... PCIe" / "... NVL": the longest matching key wins.
GPU_BF16_PEAK_TFLOPS = {
    "H200": 989.0, "H100": 989.0, "H100 NVL": 835.0, "H100 PCIE": 756.0,
    "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0, "RTX 4090": 165.0,
}


def gpu_peak_tflops(device_name: str) -> float | None:
    name = device_name.upper()
    for key in sorted(GPU_BF16_PEAK_TFLOPS, key=len, reverse=True):
        if key in name:
            return GPU_BF16_PEAK_TFLOPS[key]
    return None


def measured_cpu_peak_tflops(n: int = 2048, repeats: int = 6, dtype=None) -> float:
    """Best matmul rate of this CPU in ``dtype`` (default fp32) with torch's threads: the practical
    peak, not a data sheet."""
    import torch

    dtype = dtype or torch.float32
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class PeakMemory:
    """Peak resident memory (CPU, Linux VmHWM reset per mode) or peak allocated GPU memory."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def reset(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        else:
            with contextlib.suppress(OSError):
                Path("/proc/self/clear_refs").write_text("5")

    def peak_gib(self) -> float:
        if self.cuda:
            import torch

            return torch.cuda.max_memory_allocated() / 2**30
        peak = process_peak_gib("self")
        if peak is not None:
            return peak
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def process_peak_gib(pid: int | str | None) -> float | None:
    """Peak resident memory of a process (``"self"``: this one) since it started or since its
    peak was last reset (Linux VmHWM), in GiB; None where /proc does not say."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None
