#!/usr/bin/env python3
"""moetune's triton helper: compiles, checks and times fused-MoE Triton kernels for moetune-worker.

The worker's child starts it and speaks the line protocol of worker/HELPER.md over stdin/stdout.
Nothing but protocol lines goes to stdout: everything else (warnings, tracebacks) goes to stderr.
This file is the entry point; the parts live in the helper/ package beside it:
protocol (requests and replies), reference (fp8 quantization, the reference layer), routing
(captured expert ids), device (torch, Triton, the device), engines (where an engine keeps its
fused-MoE pieces), kernels (moetune's and an engine's), measure (timing, racing, the stop rule),
pool (compiling ahead) and probe (--probe).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the package beside this file, also under python3 -P
    sys.path.insert(0, HERE)

from helper import protocol  # noqa: E402
from helper.engines import ENGINE_NAMES, parse_names  # noqa: E402
from helper.kernels import load_kernel  # noqa: E402
from helper.measure import Measurer, Session, split_margin_from_env  # noqa: E402
from helper.pool import CompilePool  # noqa: E402
from helper.probe import probe  # noqa: E402
from helper.protocol import Fatal, ProtocolError, emit, log, mark, one_line, serve  # noqa: E402
from helper.device import device_info, file_hash, import_stack, peak_rss_kb, versions_text  # noqa: E402


def helper_sources():
    """This file and the helper package's: with the kernel's sources, what kernel_hash covers."""
    pkg = os.path.join(HERE, "helper")
    return [os.path.abspath(__file__)] + sorted(os.path.join(pkg, f) for f in os.listdir(pkg) if f.endswith(".py"))


def main(argv):
    """The helper's run: --probe answers one line; else hello, then requests until quit or EOF."""
    if protocol.PROTO_OUT is None:
        protocol.PROTO_OUT = sys.stdout
        sys.stdout = sys.stderr  # whatever a library prints must not reach the protocol stream
    ap = argparse.ArgumentParser(prog="moetune_helper.py", description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=ENGINE_NAMES + ("moetune",), default="moetune")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--cache-dir")
    ap.add_argument("--compile-workers", type=int, default=-1, help="0: compile in the measuring process")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--engine", choices=ENGINE_NAMES, default=ENGINE_NAMES[0])
    ap.add_argument("--names", help="with --probe: a JSON list of shapes to ask the engine's own lookup about")
    a = ap.parse_args(argv)
    if a.probe:
        try:
            names = parse_names(a.names) if a.names is not None else None
        except ProtocolError as e:
            emit({"fatal": str(e)})
            return 1
        return probe(a.engine, names)
    pool = None
    try:
        if a.cache_dir:
            os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(a.cache_dir, "triton"))
        split_margin = split_margin_from_env(os.environ)
        workers = a.compile_workers
        if workers < 0:
            workers = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2) - 2)
        # the pool's processes import torch and triton while this one does
        pool = CompilePool(a.kernel, a.gpu, workers) if workers > 0 else None
        torch, triton = import_stack()
        mark("imported")
        dev = device_info(torch, a.gpu)
        kernel = load_kernel(a.kernel, torch, triton)
        measurer = Measurer(torch, kernel)
        measurer.split_margin = split_margin
        mark("device")
        if pool:
            pool.cuda_up()
        compiler = "triton_" + triton.__version__.split("+")[0].replace(".", "_")
        vers = versions_text(a.kernel, torch, triton, kernel.engine)
        hello = {"kernel": a.kernel, "compiler": compiler, "versions": vers, "device": dev,
                 "kernel_hash": file_hash(helper_sources() + kernel.sources, vers)}
    except Fatal as e:
        emit({"fatal": str(e)})
        if pool:
            pool.kill()
        return 1
    except Exception as e:  # anything else at start is still one line, with the traceback on stderr
        import traceback
        traceback.print_exc()
        emit({"fatal": "%s: cannot start the %s kernel: %s" % (sys.executable, a.kernel, one_line(e))})
        if pool:
            pool.kill()
        return 1
    mark("hello")
    emit({"hello": hello})
    session = Session(kernel, measurer, pool)
    rc = serve(sys.stdin, session)
    log("done: peak rss %d MiB (measuring process %d MiB, compile processes %d MiB), %.0f s compiling ahead; %s" %
        (session.peak_rss_kb() >> 10, peak_rss_kb() >> 10, (pool.peak_kb if pool else 0) >> 10,
         pool.compile_s if pool else 0, json.dumps(session.stats(), separators=(",", ":"))))
    if pool:
        # nothing is left to compile; an orderly shutdown would join each process through its
        # CUDA context's teardown, one after another (about 2 s on an H200), while the worker waits
        pool.kill()
    return rc



if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
