"""Headless Chromium driven over the DevTools protocol (CDP) for report rendering tests.

Launches Debian's ``chromium`` with ``--remote-debugging-port=0``, reads the port from
``DevToolsActivePort`` in its profile folder, and talks CDP over a websocket (``websockets``):
collects console errors, uncaught exceptions and failed loads, measures the chart boxes, and
captures a full-page PNG. Protocol: https://chromedevtools.github.io/devtools-protocol/
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageResult:
    png: bytes
    width: int
    height: int
    scroll_width: int
    errors: list[str] = field(default_factory=list)
    charts: list[dict] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)  # boxes of the elements with a data-check attribute


class _Cdp:
    def __init__(self, ws):
        self.ws, self.next_id, self.events = ws, 0, []

    def call(self, method: str, params: dict | None = None, timeout: float = 30.0) -> dict:
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"CDP {method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("method") == method:
                return msg
            self.events.append(msg)


def _errors(events: list[dict]) -> list[str]:
    out = []
    for ev in events:
        m, p = ev.get("method"), ev.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append("log: " + p["entry"].get("text", ""))
        elif m == "Network.loadingFailed":
            out.append("load failed: " + p.get("errorText", ""))
    return out


def render(html: Path, width: int = 1100, chromium: str | None = None, timeout: float = 60.0) -> PageResult:
    """Load ``html`` (a file) at ``width`` CSS px and return errors, chart boxes and a full-page PNG."""
    from websockets.sync.client import connect

    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed")
    profile = Path(tempfile.mkdtemp(prefix="cw-chromium-"))
    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {proc.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t.get("type") == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as ws:
            cdp = _Cdp(ws)
            for domain in ("Runtime", "Log", "Page", "Network"):
                cdp.call(f"{domain}.enable")
            cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
            cdp.call("Page.navigate", {"url": html.resolve().as_uri()})
            cdp.wait_event("Page.loadEventFired", timeout)
            info = cdp.call("Runtime.evaluate", {"returnByValue": True, "expression": """JSON.stringify({
                h: document.documentElement.scrollHeight, sw: document.documentElement.scrollWidth,
                charts: Array.from(document.querySelectorAll('img.chart')).map(i => { const r = i.getBoundingClientRect();
                  return {name: i.dataset.chart, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
                          complete: i.complete, natural_width: i.naturalWidth}; }),
                checks: Array.from(document.querySelectorAll('[data-check]')).map(e => { const r = e.getBoundingClientRect();
                  return {kind: e.dataset.check, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
                          font_px: parseFloat(getComputedStyle(e).fontSize), text: e.innerText}; })})"""})
            meta = json.loads(info["result"]["value"])
            shot = cdp.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                       "clip": {"x": 0, "y": 0, "width": width, "height": meta["h"], "scale": 1}})
            time.sleep(0.2)
            try:  # drain late events (e.g. a failed lazy load)
                while True:
                    cdp.events.append(json.loads(ws.recv(timeout=0.2)))
            except TimeoutError:
                pass
            import base64

            return PageResult(base64.b64decode(shot["data"]), width, meta["h"], meta["sw"], _errors(cdp.events), meta["charts"], meta["checks"])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
