"""What the collector needs to know about its process and host before it traces: the job label,
whether a driver, a GPU, cupti-python and a free CUPTI are there (``preflight``; creates no CUDA
context), and the CUDA-ordinal -> NVML device map. Used by ``collector.session``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from collector.rows import DeviceInfo

_WARNED_ENV = "CUDAWATCH_WARNED"


def warn_once(message: str) -> None:
    """Print one ``cudawatch:`` warning per process tree (children inherit the 'warned' mark)."""
    if os.environ.get(_WARNED_ENV):
        return
    os.environ[_WARNED_ENV] = "1"
    print(f"cudawatch: {message}", file=sys.stderr, flush=True)


def job_name(explicit: str | None = None, argv: list[str] | None = None) -> str:
    """The job label: explicit, ``CUDAWATCH_JOB``, Slurm or Kubernetes job names, else the script."""
    for value in (explicit, os.environ.get("CUDAWATCH_JOB"), os.environ.get("SLURM_JOB_NAME"),
                  os.environ.get("JOB_NAME"), os.environ.get("KUBERNETES_JOB_NAME")):
        if value:
            return value
    argv = argv if argv is not None else sys.argv
    if argv and argv[0] and argv[0] != "-c":
        return Path(argv[0]).name
    return "python"


def preflight() -> str | None:
    """Why collection cannot run here, or None. Loads no CUDA context (cuInit is never called)."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 not found); the program runs without collection"
    try:
        import pynvml  # noqa: F401

        try:
            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            pynvml.nvmlShutdown()
            if n == 0:
                return "no GPU visible to NVML; the program runs without collection"
        except pynvml.NVMLError as exc:
            return f"NVML cannot see a GPU ({exc}); the program runs without collection"
    except ImportError:  # no nvidia-ml-py: the GPU count is not checked here; CUPTI's own check follows
        pass
    try:
        from collector import tracer  # noqa: F401  (imports cupti)
    except ImportError as exc:
        return f"cupti-python is not installed ({exc}); install cudawatch[collector] (cupti-python>=13.4)"
    except OSError as exc:
        return f"libcupti could not be loaded ({exc})"
    try:
        other = tracer.other_subscriber()
    except Exception as exc:  # CUPTI init errors surface here (no device, virtualization, ...)
        return f"CUPTI is unusable here ({exc})"
    if other:
        return f"stepping aside: {other}"
    return None


def device_map(errors: list[str] | None = None) -> dict[int, DeviceInfo]:
    """CUDA device ordinal -> NVML UUID/index/model, honouring CUDA_VISIBLE_DEVICES.

    Empty when NVML is missing or fails; then why is appended to ``errors`` (the session counts it
    in the window's ``collector_errors``: rows are written without GPU UUIDs)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        if errors is not None:
            errors.append(f"NVML device map: {type(exc).__name__}: {exc}")
        return {}
    try:
        n = pynvml.nvmlDeviceGetCount()
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)}
        uuids = {i: _s(pynvml.nvmlDeviceGetUUID(h)) for i, h in handles.items()}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        order = list(range(n))
        if visible is not None:
            order = []
            for tok in (t.strip() for t in visible.split(",") if t.strip()):
                if tok.isdigit() and int(tok) < n:
                    order.append(int(tok))
                else:
                    order.extend(i for i, u in uuids.items() if u.startswith(tok))
        return {ordinal: DeviceInfo(uuids[i], i, _s(pynvml.nvmlDeviceGetName(handles[i]))) for ordinal, i in enumerate(order)}
    except Exception as exc:
        if errors is not None:
            errors.append(f"NVML device map: {type(exc).__name__}: {exc}")
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # cleanup only: the map above is complete or its failure already reported
            pass


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
