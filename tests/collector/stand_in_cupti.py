"""A stand-in for cupti-python's ``cupti`` module, and a runner for code against it in a fresh
interpreter: the tracer, its drain and its finalizer run on CPU as they would on a GPU (used by
test_drain.py, test_finalize.py and test_tracer_callback.py)."""

import json
import os
import subprocess
import sys
import textwrap

from .conftest import REPO


FAKE_CUPTI = '''
"""Stand-in for cupti-python's ``cupti`` module: kernels 'finish' at given times of a virtual clock
(``state["now"]``, advanced only by the tracer's sleep); a forced flush returns unfinished ones
without timestamps (start = end = 0), as CUPTI does. One callback subscriber at a time (CUPTI 13.4);
``api_call()`` is an application's CUDA runtime call (enter and exit callbacks while the domain is on)."""
import threading, time, types

calls = []
finalized_on = []   # thread of each finalize
finalized_at = []   # callback site it ran in (None: outside any API callback)
_in_api = threading.local()
state = {"completed": None, "queue": [], "now": 0.0,   # queue: virtual times at which launched kernels finish
         "subscriber": None, "domains": set(), "refuse_subscribe": False, "busy": False, "overlaps": 0}

class _E:
    def __init__(self, *names):
        for i, n in enumerate(names):
            setattr(self, n, i)

ActivityKind = _E("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "OVERHEAD")
ActivityOverheadKind = _E("CUPTI_INSTRUMENTATION", "CUPTI_RESOURCE", "COMMAND_BUFFER_FULL")
ActivityAttribute = _E("ATTR_DEVICE_BUFFER_SIZE", "ATTR_DEVICE_BUFFER_POOL_LIMIT")
Result = _E("SUCCESS", "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
CallbackDomain = _E("INVALID", "DRIVER_API", "RUNTIME_API")
ApiCallbackSite = _E("API_ENTER", "API_EXIT")
class cuptiError(Exception):
    def __init__(self, status=None):
        super().__init__(f"CUPTI status {status}")
        self.status = status

def activity_register_callbacks(req, done): state["completed"] = done
def activity_set_attribute(*a): pass
def get_timestamp(): return time.time_ns()
def activity_enable(k): calls.append("enable")
def activity_disable(k): calls.append("disable")

def _cupti_call(name):  # CUPTI calls must not overlap a finalize
    state["overlaps"] += state["busy"]
    calls.append(name)

def finalize():
    _cupti_call("finalize")
    finalized_on.append(threading.current_thread().name)
    finalized_at.append(getattr(_in_api, "site", None))
    state["subscriber"], state["domains"], state["busy"] = None, set(), True
    time.sleep(0.001)   # cupti-python releases the GIL around cuptiFinalize
    state["busy"] = False

def subscribe(cb, userdata):
    if state["refuse_subscribe"] or state["subscriber"]:
        raise cuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    _cupti_call("subscribe")
    state["subscriber"] = (cb, userdata)
    return 7

def unsubscribe(h):
    _cupti_call("unsubscribe")
    state["subscriber"], state["domains"] = None, set()

def enable_domain(on, h, domain):
    _cupti_call("enable_domain")
    state["domains"].add(domain)

def api_call():  # a runtime call that reaches the driver: runtime enter, driver enter/exit, runtime exit
    R, D, E, X = CallbackDomain.RUNTIME_API, CallbackDomain.DRIVER_API, ApiCallbackSite.API_ENTER, ApiCallbackSite.API_EXIT
    for domain, site in ((R, E), (D, E), (D, X), (R, X)):
        sub = state["subscriber"]
        if sub and domain in state["domains"]:
            _in_api.site = site
            sub[0](sub[1], domain, 0, types.SimpleNamespace(callback_site=site))
            _in_api.site = None

def _record(t_done, now):
    ok = t_done <= now
    s = int(t_done * 1e9) + 1_000_000 if ok else 0
    return types.SimpleNamespace(kind=ActivityKind.CONCURRENT_KERNEL, start=s, end=s + 1000 if ok else 0, name="k",
        grid_x=1, grid_y=1, grid_z=1, block_x=1, block_y=1, block_z=1, registers_per_thread=8,
        static_shared_memory=0, dynamic_shared_memory=0, device_id=0)

def activity_flush_all(flag):
    _cupti_call("flush_forced" if flag else "flush")
    if flag:
        now = state["now"]
        recs, state["queue"] = [_record(t, now) for t in state["queue"]], []
        state["completed"](recs)
'''


#: What every stand-in run starts with: the drain's sleep advances the stand-in's virtual clock, and
#: ``queued_detach`` detaches with 50 kernels queued to finish 5-50 ms (virtual) after it starts.
PRELUDE = """
import json, time, types
from cupti import cupti
import collector.drain, collector.tracer as tracer_mod
from collector.aggregate import Aggregator
from collector.cuda_fence import FenceError
from collector.tracer import CuptiTracer

def sleep(s):
    cupti.calls.append(f"wait {s:g}")
    cupti.state["now"] += s
collector.drain.time = types.SimpleNamespace(sleep=sleep, perf_counter=time.perf_counter)

def queued_detach(t, agg):
    t.attach()
    cupti.calls.clear()
    now = cupti.state["now"]
    cupti.state["queue"] = [now + 0.001 * (5 + 45 * i / 49) for i in range(50)]
    z0 = agg.invalid_zero_ts
    t.detach()
    return agg.invalid_zero_ts - z0
"""


def _run_stand_in(tmp_path, body: str, **env: str):
    """Run ``PRELUDE + body`` in a fresh interpreter with the stand-in ``cupti`` module and only the
    given CUDAWATCH_ settings (the adaptive drain unless they set another); returns what it printed, read as JSON."""
    (tmp_path / "cupti").mkdir()
    (tmp_path / "cupti" / "__init__.py").write_text("")
    (tmp_path / "cupti" / "cupti.py").write_text(FAKE_CUPTI)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAWATCH_")}
    run_env["CUDAWATCH_DETACH_DRAIN"] = "adaptive"  # the default fence needs libcuda: tests that want it say so
    run_env.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", **env)
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                       env=run_env, cwd=REPO, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)
