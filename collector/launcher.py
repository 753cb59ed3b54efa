"""``cudawatch collect``: run a command with the collector injected through ``sitecustomize``.

The child gets ``PYTHONPATH=<collector/inject>:<package root>:$PYTHONPATH`` and ``CUDAWATCH_COLLECT=1``;
every Python process it starts then runs ``collector.start()`` before user code. SIGINT and SIGTERM
are forwarded to the child; after it exits, spools it left behind (a crash, SIGKILL) are turned
into shards, and its exit status is returned (128+N when a signal N ended it, like a shell).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

INJECT_DIR = Path(__file__).resolve().parent / "inject"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def child_env(job: str | None, out: str | os.PathLike, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    parts = [str(INJECT_DIR), str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["CUDAWATCH_COLLECT"] = "1"
    env["CUDAWATCH_SHARDS"] = str(Path(out).resolve())
    if job:
        env["CUDAWATCH_JOB"] = job
    return env


def default_job(command: list[str]) -> str:
    """Job label from the command: the script of ``python x.py``, else the program name."""
    for arg in command[1:]:
        if arg.endswith(".py"):
            return Path(arg).name
    if len(command) > 2 and command[1] == "-m":
        return command[2]
    return Path(command[0]).name


def run(command: list[str], *, job: str | None = None, out: str | os.PathLike = "shards") -> int:
    """Run ``command`` with collection on; returns its exit status."""
    if not command:
        raise ValueError("no command given: use cudawatch collect [--job NAME] [--out DIR] -- python train.py ...")
    Path(out).mkdir(parents=True, exist_ok=True)
    env = child_env(job or os.environ.get("CUDAWATCH_JOB") or default_job(command), out)
    try:
        proc = subprocess.Popen(command, env=env)
    except FileNotFoundError as exc:
        raise ValueError(f"command not found: {command[0]} ({exc})") from exc
    forwarded = {}

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM):
        forwarded[sig] = signal.signal(sig, forward)
    try:
        rc = proc.wait()
    finally:
        for sig, prev in forwarded.items():
            signal.signal(sig, prev)
    try:
        from collector.spool import recover

        recover(out)  # spools of processes that died without writing their last shards
    except Exception as exc:  # the spool files stay where they are; the next collector start retries
        print(f"cudawatch: could not turn leftover spools under {out} into shards ({type(exc).__name__}: {exc}); "
              "they are kept and retried at the next start", file=sys.stderr, flush=True)
    return 128 - rc if rc < 0 else rc
