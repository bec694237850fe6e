"""What compare.py and engine_style.py share: the triton helper's modules (worker/helper/) and the stack they
measure one bf16 shape with."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "worker"))
from helper import device, kernels, measure  # noqa: E402


def open_bf16(shape_text, kernel_name="moetune"):
    """Imports torch and Triton, and readies a kernel (moetune's, or an importable engine's: "sglang",
    "vllm") and a measurer (seed 1) on the bf16 shape "E,N,K,topk". Returns (torch, kernel, measurer,
    shape)."""
    torch, triton = device.import_stack()
    e, n, k, topk = (int(v) for v in shape_text.split(","))
    shape = {"e": e, "n": n, "k": k, "topk": topk, "dtype": "bf16"}
    kernel = kernels.load_kernel(kernel_name, torch, triton)
    meas = measure.Measurer(torch, kernel)
    meas.set_shape(shape, 1)
    return torch, kernel, meas, shape
