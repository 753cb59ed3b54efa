"""Root-cause benchmark: does the right cause rank first, and is nothing claimed on clean data?

For every injected kind of the simulator and several seeds, one scenario: simulate a fleet with that
single injection, ingest it into a fresh DuckDB warehouse, run detection hour by hour as the hourly
DAG does (analytics.detect.detect_regressions), attach causes (analytics.explain.attach_causes) when a
regression is first reported (what an alert would say) and again at the end of the run (with the
whole after-window). A regression matches the injection when it is on the injected job (or GPU)
and its onset is within +-3 hours of the injected one. The top cause is correct when it is in
``EXPECTED[kind]``.

Detection delay (issue 15): each event records the hour of the hourly run that first reported it;
per injection, found within 3 hourly runs (the runs at onset, onset + 1, onset + 2), within 6, or
at all, and the number of incidents holding its events when all of the fleet's events are grouped
as reports group them (``analytics.incidents.group_incidents``), plus the incidents no injection
explains. Hourly runs: onset - 1 .. onset + 8 and the last hour; on clean fleets hour 24 .. onset + 8
and the last hour; on default-scenario fleets every hour from hour 24.

Clean data, two ways: (1) regression-free fleets through the same pipeline (any regression found
is a false alarm; a cause claimed on it counts against the rules), and (2) a stress test of the
rules alone: a pseudo-regression at a random onset on every kernel series, job and GPU of a clean
fleet, so every rule is exercised on data where nothing changed.

    .venv/bin/python benchmarks/rootcause.py --seeds 3 --workers 2 --json rootcause.json
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)

#: Injected kind -> rules whose ranking first counts as correct.
EXPECTED: dict[str, set[str]] = {
    "kernel_slowdown": {"kernel_slower"},
    "launch_config_change": {"launch_config_changed"},
    "new_kernel": {"new_kernel"},
    "kernel_vanished": {"kernel_vanished"},
    "more_launches": {"more_launches"},
    "pageable_memcpy": {"pageable_memcpy"},
    "memcpy_throughput_drop": {"memcpy_throughput_drop"},
    "clock_throttle": {"clock_throttle", "straggler_gpu"},
    "gpu_idle_gaps": {"gpu_idle_gaps"},
    "contention": {"contention"},
}


def _analyze_hourly(con, first: dt.datetime, last: dt.datetime) -> dict[str, tuple[dt.datetime, object]]:
    """Hourly detection from ``first`` to ``last``; causes attached when an event is first reported.
    Returns event_id -> (hour of the run that first reported it, Regression with its causes then)."""
    from analytics import detect, explain

    at_detection: dict[str, tuple[dt.datetime, object]] = {}
    hour = first
    while hour <= last:
        new = [r for r in detect.detect_regressions(con, hour) if r.event_id not in at_detection]
        for r in explain.attach_causes(con, new, as_of=hour):  # the data an hourly run has
            at_detection[r.event_id] = (hour, r)
        hour += dt.timedelta(hours=1)
    return at_detection


def _matches(reg, truth: dict) -> bool:
    onset = dt.datetime.fromisoformat(truth["onset"])
    if abs((reg.onset - onset).total_seconds()) > 3 * 3600:
        return False
    if reg.gpu_uuid is not None:
        return truth.get("gpu_uuid") == reg.gpu_uuid or reg.job == truth["job"]
    return reg.job == truth["job"]


def match(reg, truths: list[dict]) -> dict | None:
    """The injection a detected regression belongs to: same job (or GPU), onset within +-3 h; with
    several candidates (the default scenario injects several kinds), the same kernel, then the same
    GPU, then the nearest onset wins."""
    cands = [t for t in truths if _matches(reg, t)]
    if not cands:
        return None
    return min(cands, key=lambda t: (not (reg.kernel_id and reg.kernel_id == t.get("kernel_id")),
                                     not (reg.gpu_uuid and reg.gpu_uuid == t.get("gpu_uuid")),
                                     abs((reg.onset - dt.datetime.fromisoformat(t["onset"])).total_seconds())))


#: Series an oracle regression (built from the ground truth, not detected) uses, per injected kind.
ORACLE_SERIES = {
    "kernel_slowdown": "kernel_mean_ns", "launch_config_change": "kernel_busy_s", "new_kernel": "kernel_busy_s",
    "kernel_vanished": "kernel_launches", "more_launches": "kernel_launches", "clock_throttle": "gpu_sm_clock_mhz",
}


def oracle_regression(truth: dict):
    """The regression a perfect detector would report for one injection (rules are judged alone)."""
    from analytics.results import Regression

    kind = truth["kind"]
    series = ORACLE_SERIES.get(kind, "job_gpu_busy_s")
    gpu = truth.get("gpu_uuid") if series.startswith("gpu_") else None
    kid = truth.get("kernel_id") if series.startswith("kernel_") else None
    return Regression(truth["job"], truth.get("kernel") if kid else None, kid, gpu, series,
                      dt.datetime.fromisoformat(truth["onset"]), 1.0, 1.0 + truth["magnitude_pct"] / 100,
                      truth["magnitude_pct"], 0.0, "medium")


def _summary(reg) -> dict:
    return {"event_id": reg.event_id, "series": reg.series, "job": reg.job, "kernel": (reg.kernel or "")[:60],
            "gpu_uuid": reg.gpu_uuid, "onset": reg.onset.isoformat(), "magnitude_pct": round(reg.magnitude_pct, 2),
            "causes": [[f.rule, f.confidence] for f in reg.causes],
            "top": {"rule": reg.causes[0].rule, "evidence": dict(reg.causes[0].evidence),
                    "recommendation": reg.causes[0].recommendation} if reg.causes else None}


def run_scenario(kind: str | None, seed: int, gpus: int, hours: int, onset: int, pct: float | None = None) -> dict:
    """One fleet with one injection of ``kind`` (None: a clean fleet), analysed hour by hour."""
    from analytics import detect, explain, store
    from analytics.incidents import group_incidents
    import simulator

    tmp = Path(tempfile.mkdtemp(prefix="rootcause-"))
    try:
        if kind == "default":
            injections = None  # the simulator's default scenario: every core kind, onsets spread over the 2nd half
        else:
            size = f",pct={pct:g}" if pct and kind != "kernel_vanished" else ""
            injections = [] if kind is None else simulator.parse_injections([f"kind={kind},hour={onset}{size}"])
        t0 = time.perf_counter()
        simulator.simulate_fleet(tmp / "shards", gpus=gpus, hours=hours, seed=seed, start=START, injections=injections)
        truth = json.loads((tmp / "shards" / "ground_truth.json").read_text())
        truth = truth.get("regressions", truth) if isinstance(truth, dict) else truth
        con = store.connect(tmp / "w.duckdb")
        store.ingest_shards(tmp / "shards", con)
        last = START + dt.timedelta(hours=hours - 1)
        # hourly runs from just before onset to 8 hours after it (new events show up there), then the last hour
        first = START + dt.timedelta(hours=max(24, onset - 1) if kind not in (None, "default") else 24)
        if kind == "default":
            onset = hours - 8
        at_detection = _analyze_hourly(con, first, min(last, START + dt.timedelta(hours=onset + 8)))
        at_detection.update({k: v for k, v in _analyze_hourly(con, last, last).items() if k not in at_detection})
        final = {r.event_id: r for r in explain.attach_causes(con, detect.load_regressions(con))}
        out = {"kind": kind, "seed": seed, "truth": truth, "seconds": round(time.perf_counter() - t0, 1), "events": []}
        groups: dict[int | None, list] = collections.defaultdict(list)  # truth index (None: unmatched) -> events
        for event_id, r in final.items():
            hour, first_seen = at_detection.get(event_id, (None, r))
            t = match(r, truth)
            i = truth.index(t) if t is not None else None
            groups[i].append(r)
            out["events"].append({"matched": t is not None, "truth_kind": t["kind"] if t else None, "truth_index": i,
                                  "reported_hour": hour.isoformat() if hour else None,  # the run that first reported it
                                  "at_detection": _summary(first_seen), "at_end": _summary(r)})
        # incidents as reports and alerts group them (analytics.incidents over all of the fleet's events,
        # causes at the end of the run): per injection, the incidents holding any of its events; "unmatched",
        # the incidents holding none of any injection's events (extra alerts)
        owner = {r.event_id: i for i, regs in groups.items() for r in regs}
        owners = [{owner[m.event_id] for m in inc.members} for inc in group_incidents(list(final.values()))]
        out["incidents"] = {"per_injection": [sum(i in o for o in owners) for i in range(len(truth))],
                            "unmatched": sum(o == {None} for o in owners)}
        out["oracle"] = [dict(_summary(r), truth_kind=t["kind"])
                         for r, t in zip(explain.attach_causes(con, [oracle_regression(t) for t in truth]), truth)]
        if kind is None:
            out["stress"] = stress_clean(con, START + dt.timedelta(hours=24), last - dt.timedelta(hours=4), seed)
        con.close()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stress_clean(con, lo: dt.datetime, hi: dt.datetime, seed: int) -> dict:
    """Pseudo-regressions at random onsets on every kernel signature, job and GPU of a clean fleet."""
    from analytics import explain
    from analytics.results import Regression

    rng = random.Random(seed)
    span = int((hi - lo).total_seconds() // 3600)
    regs = []
    sigs = con.execute("SELECT DISTINCT job, kernel_id, kernel, signature FROM kernel_hourly ORDER BY ALL").fetchall()
    for job, kid, kernel, sig in rng.sample(sigs, min(len(sigs), 60)):
        regs.append(Regression(job, kernel, kid, None, "kernel_mean_ns", lo + dt.timedelta(hours=rng.randint(0, span)),
                               1.0, 1.0, 0.0, 1.0, "low", signature=sig))
    for (job,) in con.execute("SELECT DISTINCT job FROM kernels").fetchall():
        regs.append(Regression(job, None, None, None, "job_gpu_busy_s", lo + dt.timedelta(hours=rng.randint(0, span)),
                               1.0, 1.0, 0.0, 1.0, "low"))
    for (gpu,) in con.execute("SELECT DISTINCT gpu_uuid FROM device").fetchall():
        regs.append(Regression("", None, None, gpu, "gpu_sm_clock_mhz", lo + dt.timedelta(hours=rng.randint(0, span)),
                               1.0, 1.0, 0.0, 1.0, "low"))
    claimed = collections.Counter()
    examples = []
    t0 = time.perf_counter()
    attached = explain.attach_causes(con, regs)
    seconds = time.perf_counter() - t0
    for r in attached:
        for f in r.causes:
            claimed[f.rule] += 1
            if len(examples) < 5:
                examples.append({"regression": _summary(r), "rule": f.rule, "evidence": dict(f.evidence)})
    con.execute("DELETE FROM findings WHERE event_id IN (SELECT unnest(?::VARCHAR[]))", [[r.event_id for r in regs]])
    return {"pseudo_regressions": len(regs), "with_cause": sum(1 for _ in claimed.elements()), "by_rule": dict(claimed),
            "examples": examples, "attach_seconds": round(seconds, 2)}


def confusion(results: list[dict], when: str, mixed: bool = False) -> tuple[dict, dict]:
    """kind -> Counter(top cause) and kind -> (correct, injections), one unit per injection.

    An injection is one unit however many events it produced (a contention injection slows every
    kernel of the job): its cause is the top cause of its matched event with the largest
    |magnitude| (what the report ranks first); an injection nothing matched counts as "not
    detected" (wrong). Over the single-injection scenarios, or the mixed default-scenario ones.
    """
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    score: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for res in results:
        if res["kind"] is None or (res["kind"] == "default") != mixed:
            continue
        for i, truth in enumerate(res["truth"]):
            kind = truth["kind"]
            if when == "oracle":
                evs = [res["oracle"][i]]
            else:
                evs = [e[when] for e in res["events"] if e["matched"] and e.get("truth_index") == i]
            if evs:
                lead = max(evs, key=lambda e: abs(e["magnitude_pct"]))
                top = lead["causes"][0][0] if lead["causes"] else "none"
            else:
                top = "not detected"
            table[kind][top] += 1
            score[kind][1] += 1
            score[kind][0] += top in EXPECTED[kind]
    return table, score


def delays(results: list[dict], mixed: bool = False) -> dict:
    """Detection delay and incidents, one unit per injection (as ``confusion``).

    An injection's delay is the hour of the first hourly run that reported one of its matched events
    minus its onset: found within 3 runs when <= 2 h (the runs at onset, onset + 1 and onset + 2),
    within 6 runs when <= 5 h; found at all when anything matched it (as in "not detected").
    Incidents: the fleet's events grouped by ``analytics.incidents.group_incidents`` as reports do (one
    alert per incident); an injection's count is the incidents holding any of its events; with one
    injection per fleet, also the incidents holding no injection's events ("other": extra alerts).
    Returns {"kinds": kind -> counts and per-injection incident counts, "late": the injections not
    found within 3 runs, "unmatched": events and incidents no injection explains}.
    """
    kinds: dict[str, dict] = {}
    late, unmatched = [], [0, 0]
    for res in results:
        if res["kind"] is None or (res["kind"] == "default") != mixed:
            continue
        unmatched[0] += sum(1 for e in res["events"] if not e["matched"])
        unmatched[1] += res["incidents"]["unmatched"]
        for i, truth in enumerate(res["truth"]):
            onset = dt.datetime.fromisoformat(truth["onset"])
            evs = [e for e in res["events"] if e["matched"] and e["truth_index"] == i]
            first_seen = min((((dt.datetime.fromisoformat(e["reported_hour"]) - onset).total_seconds() / 3600, e)
                              for e in evs if e["reported_hour"]), key=lambda x: x[0], default=None)
            delay = first_seen[0] if first_seen else None
            row = kinds.setdefault(truth["kind"], {"injections": 0, "within_3": 0, "within_6": 0, "found": 0, "incidents": [],
                                                   "other_incidents": None if mixed else 0})
            if not mixed:  # one injection per fleet: the fleet's extra incidents go to its kind once
                row["other_incidents"] += res["incidents"]["unmatched"]
            row["injections"] += 1
            row["found"] += bool(evs)
            row["within_3"] += delay is not None and delay <= 2
            row["within_6"] += delay is not None and delay <= 5
            row["incidents"].append(res["incidents"]["per_injection"][i])
            if delay is None or delay > 2:
                first = (first_seen[1] if first_seen else evs[0])["at_end"] if evs else None
                late.append({"kind": truth["kind"], "seed": res["seed"], "onset": truth["onset"], "delay_h": delay,
                             "first_event": {k: first[k] for k in ("series", "job", "kernel", "gpu_uuid", "onset", "magnitude_pct")}
                             if first else None})
    return {"kinds": kinds, "late": late, "unmatched": {"events": unmatched[0], "incidents": unmatched[1]}}


def print_delays(d: dict, order: list[str]) -> None:
    """The ``delays`` view as a markdown table, then the late injections."""
    other = not any(r["other_incidents"] is None for r in d["kinds"].values())
    print("| injected kind | injections | found within 3 runs | within 6 runs | at all | incidents per injection |"
          + (" other incidents in its fleets |" if other else ""))
    print("|---|---|---|---|---|---|" + ("---|" if other else ""))
    tot = [0, 0, 0, 0, []]
    for k in [k for k in order if k in d["kinds"]]:
        r = d["kinds"][k]
        n = r["injections"]
        print(f"| {k} | {n} | {r['within_3']}/{n} | {r['within_6']}/{n} | {r['found']}/{n} | {', '.join(map(str, r['incidents']))} |"
              + (f" {r['other_incidents']} |" if other else ""))
        for j, key in enumerate(("injections", "within_3", "within_6", "found")):
            tot[j] += r[key]
        tot[4] += r["incidents"]
    n = tot[0]
    if n:
        print(f"| **all** | {n} | **{tot[1]}/{n}** | {tot[2]}/{n} | {tot[3]}/{n} | "
              f"{sum(tot[4]) / n:.2f} (max {max(tot[4])}) |" + (f" {d['unmatched']['incidents']} |" if other else ""))
    print(f"\nevents / incidents in these fleets that match no injection: {d['unmatched']['events']} / {d['unmatched']['incidents']}")
    for x in d["late"]:
        e = x["first_event"]
        where = f"{e['series']} {e['job']} {e['kernel'] or e['gpu_uuid'] or ''} onset {e['onset']}" if e else ""
        when = "never reported by an hourly run" if x["delay_h"] is None else f"first reported {x['delay_h']:+.0f} h after onset"
        print(f"  not within 3 runs: {x['kind']} seed {x['seed']} (onset {x['onset']}): "
              f"{when if e else 'not detected'}{'; ' + where if e else ''}")


def workers_note(workers: int) -> str:
    return f"{workers} scenarios in parallel on this machine's {os.cpu_count()} cores"


def main(argv=None) -> int:
    from simulator import injections as inj

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--gpus", type=int, default=16)
    p.add_argument("--hours", type=int, default=48)
    p.add_argument("--onset", type=int, default=32)
    p.add_argument("--pct", type=float, default=None, help="magnitude of every injection (default: each kind's default)")
    p.add_argument("--kinds", default=",".join(inj.KINDS))
    p.add_argument("--clean", type=int, default=None, help="clean fleets (default: --seeds)")
    p.add_argument("--mixed", type=int, default=0, help="fleets of the default scenario (all core kinds at once)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="write all results here")
    p.add_argument("--seed-base", type=int, default=5000,
                   help="first seed: single injections use BASE+s, clean fleets BASE+1000+s, mixed BASE+2000+s. "
                        "The rules were tuned on seeds 1000-1002, 2000-2002 and 3000-3001 (the old default, --seed-base 1000)")
    p.add_argument("--examples", action="store_true", help="print one finding's evidence per kind (for the docs)")
    a = p.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    b = a.seed_base
    jobs = [(k, b + s) for k in kinds for s in range(a.seeds)] + [("default", b + 2000 + s) for s in range(a.mixed)] + \
        [(None, b + 1000 + s) for s in range(a.clean if a.clean is not None else a.seeds)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(a.workers) as pool:
        futs = [pool.submit(run_scenario, k, s, a.gpus, a.hours, a.onset, a.pct) for k, s in jobs]
        results = []
        for f, (k, s) in zip(futs, jobs):
            try:
                results.append(f.result())
            except Exception as exc:  # noqa: BLE001 - report and go on with the other scenarios
                print(f"scenario {k} seed {s} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    print(f"# root-cause benchmark: {len(results)} scenarios, {a.gpus} GPUs x {a.hours} h, onset hour {a.onset}, "
          f"magnitude {f'{a.pct:g} %' if a.pct else 'default per kind'}, seeds from {a.seed_base}, one unit per injection, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()} ({platform.processor() or platform.machine()}), {elapsed:.0f} s")
    sections = [("oracle", False), ("at_detection", False), ("at_end", False)]
    if a.mixed:
        sections += [("oracle", True), ("at_end", True)]
    for when, mixed in sections:
        table, score = confusion(results, when, mixed)
        cols = sorted({c for t in table.values() for c in t})
        title = {"oracle": "rules alone: regressions built from the ground truth (a perfect detector)",
                 "at_detection": "pipeline: detected regressions, causes when first reported",
                 "at_end": "pipeline: detected regressions, causes at the end of the run"}[when]
        scen = "default scenario, all core kinds in one fleet" if mixed else "one injection per fleet"
        print(f"\n## {scen}; {title}\n")
        print("| injected kind | injections | correct first | " + " | ".join(cols) + " |")
        print("|---|---|---|" + "---|" * len(cols))
        for k in [k for k in inj.KINDS if k in score or k in kinds]:
            c, n = score.get(k, [0, 0])
            print(f"| {k} | {n} | {c}/{n} ({100 * c / n:.0f} %) | " if n else f"| {k} | 0 | - | ", end="")
            print(" | ".join(str(table[k].get(col, "")) for col in cols) + " |")
        tot_c = sum(v[0] for v in score.values())
        tot_n = sum(v[1] for v in score.values())
        print(f"\ncorrect cause ranked first: {tot_c}/{tot_n} = {100 * tot_c / max(tot_n, 1):.1f} %")
    undetected = [(t["kind"], r["seed"]) for r in results if r["kind"] for t in r["truth"]
                  if not any(e["matched"] and e["truth_kind"] == t["kind"] for e in r["events"])]
    print(f"\ninjections not detected by the pipeline: {len(undetected)} {undetected}")
    extra = [(r["kind"], e["at_end"]) for r in results if r["kind"] for e in r["events"] if not e["matched"]]
    for k, e in extra:
        print(f"  unmatched in {k}: {e['series']} {e['job']} {e['kernel'] or e['gpu_uuid']} onset {e['onset']} "
              f"{e['magnitude_pct']:+.1f} % causes {e['causes']}")
    print(f"unmatched regressions in injected scenarios: {len(extra)}; with a cause: {sum(1 for _, e in extra if e['causes'])}")
    clean = [r for r in results if r["kind"] is None]
    fp = [e for r in clean for e in r["events"]]
    print(f"\n## clean fleets: {len(clean)}; regressions found: {len(fp)}; with a cause claimed: {sum(1 for e in fp if e['at_end']['causes'])}")
    stress = collections.Counter()
    n_pseudo = 0
    for r in clean:
        n_pseudo += r["stress"]["pseudo_regressions"]
        stress.update(r["stress"]["by_rule"])
    clean_view = [{"seed": r["seed"], "events": len(r["events"]), "incidents": r["incidents"]["unmatched"]} for r in clean]
    per_fleet = ", ".join(f"{c['events']} / {c['incidents']}" for c in clean_view)
    print(f"clean fleets, events / incidents per fleet: {per_fleet}")
    print(f"stress test: {n_pseudo} pseudo-regressions at random onsets on clean data; causes claimed: {sum(stress.values())} {dict(stress)}")
    secs = sum(r["stress"].get("attach_seconds", 0) for r in clean)
    if n_pseudo:
        print(f"attach_causes speed: {1000 * secs / n_pseudo:.0f} ms per regression (context load + 14 rules + store), "
              f"{n_pseudo} regressions, {workers_note(a.workers)}")
    delay: dict = {"clean": clean_view}
    for mixed in (False, True) if a.mixed else (False,):
        d = delays(results, mixed)
        delay["mixed" if mixed else "single"] = d
        scen = "default scenario, all core kinds in one fleet" if mixed else "one injection per fleet"
        print(f"\n## detection delay, {scen}: first hourly run reporting a matched event (runs at onset, +1, +2 = within 3)\n")
        print_delays(d, list(inj.KINDS))
    if a.examples:
        print("\n## examples (top finding of the first oracle regression of each kind)\n")
        for k in kinds:
            top = next((o["top"] for r in results if r["kind"] == k for o in r["oracle"] if o["top"]), None)
            if top:
                print(f"* `{k}` -> `{top['rule']}`: `{json.dumps(top['evidence'], default=str)}`")
    if a.json:
        a.json.write_text(json.dumps({"args": vars(a) | {"json": str(a.json)}, "delay": delay, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
