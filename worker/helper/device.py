"""The interpreter's torch and Triton, the device they see, and what the hello reports about them."""
import hashlib
import sys

from .engines import engine_version
from .protocol import Fatal, one_line


def import_stack():
    """torch and triton, or Fatal naming what is missing and which interpreter was asked."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        raise Fatal("torch is not importable by %s: %s" % (sys.executable, one_line(e)))
    try:
        import triton
    except Exception as e:
        raise Fatal("triton is not importable by %s (torch %s): %s" %
                    (sys.executable, getattr(torch, "__version__", "?"), one_line(e)))
    return torch, triton


def versions_text(kernel, torch, triton, engine=None):
    parts = ["kernel=%s" % kernel, "triton=%s" % triton.__version__, "torch=%s" % torch.__version__.split("+")[0],
             "python=%d.%d.%d" % sys.version_info[:3]]
    if engine:
        parts.append("engine=%s-%s" % (engine, engine_version(engine) or "unknown"))
    return " ".join(parts)


def device_info(torch, gpu):
    if not torch.cuda.is_available():
        raise Fatal("no CUDA GPU visible to torch %s in %s" % (torch.__version__, sys.executable))
    if gpu >= torch.cuda.device_count():
        raise Fatal("GPU %d asked, torch in %s sees %d" % (gpu, sys.executable, torch.cuda.device_count()))
    torch.cuda.set_device(gpu)
    p = torch.cuda.get_device_properties(gpu)
    dev = {"name": torch.cuda.get_device_name(gpu), "uuid": str(getattr(p, "uuid", "")),
           "cc_major": p.major, "cc_minor": p.minor, "sm_count": p.multi_processor_count,
           "memory_bytes": p.total_memory, "driver_version": "", "cuda_version": str(torch.version.cuda or ""),
           "clock_khz": 0, "mem_clock_khz": 0,
           "smem_per_block": int(getattr(p, "shared_memory_per_block_optin", 0) or 0),
           "regs_per_block": int(getattr(p, "regs_per_multiprocessor", 0) or 0)}
    if dev["uuid"] and not dev["uuid"].startswith("GPU-"):
        dev["uuid"] = "GPU-" + dev["uuid"]
    try:
        import ctypes
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            dev["driver_version"] = buf.value.decode()
    except OSError:
        pass
    return dev


def peak_rss_kb():
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def file_hash(paths, extra):
    h = hashlib.sha256(extra.encode())
    for p in paths:
        try:
            with open(p, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(p.encode())
    return h.hexdigest()[:16]
