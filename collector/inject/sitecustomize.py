"""Started by ``cudawatch collect`` through PYTHONPATH: starts the collector, then runs any other
``sitecustomize`` that this one shadows, so the user's own site customization still happens."""

import os
import sys


def _cudawatch_start() -> None:
    if os.environ.get("CUDAWATCH_COLLECT") != "1":
        return
    try:
        import collector

        collector.start(job=os.environ.get("CUDAWATCH_JOB") or None, out=os.environ.get("CUDAWATCH_SHARDS") or None)
    except Exception as exc:  # never break the user's program
        if not os.environ.get("CUDAWATCH_WARNED"):
            os.environ["CUDAWATCH_WARNED"] = "1"
            print(f"cudawatch: collector off: it failed to start ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def _chain_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_cudawatch_start()
_chain_next_sitecustomize()
