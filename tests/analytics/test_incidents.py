"""One alert per incident (analytics.incidents): contention across many kernels, a deploy, a
throttled GPU, and regressions that must stay apart."""

import datetime as dt

from analytics.incidents import group_incidents
from analytics.results import Finding, Regression

T = dt.datetime(2026, 11, 3, 10, tzinfo=dt.timezone.utc)
H = dt.timedelta(hours=1)


def reg(job="train", kernel="k0", series="kernel_mean_ns", onset=T, severity="medium", cause=None, conf=0.8,
        gpu=None, evidence=None, mag=10.0, share=0.1):
    causes = (Finding(cause, conf, evidence or {}),) if cause else ()
    return Regression(job=job, kernel=kernel if gpu is None else None, kernel_id=None if gpu else f"id-{kernel}",
                      gpu_uuid=gpu, series=series, onset=onset, before=1.0, after=1.1, magnitude_pct=mag, p_value=0.0,
                      severity=severity, share_gpu_time=share, causes=causes)


def test_contention_on_36_kernels_is_one_incident():
    regs = [reg(kernel=f"k{i}", onset=T + (i % 2) * H, cause="contention", severity="high" if i == 7 else "low")
            for i in range(36)]
    inc = group_incidents(regs)
    assert len(inc) == 1
    assert inc[0].cause == "contention" and inc[0].severity == "high" and len(inc[0].members) == 36
    assert inc[0].onset == T and inc[0].members[0].kernel == "k7"


def test_throttled_gpu_and_its_kernels_are_one_incident():
    clock = reg(job="", series="gpu_sm_clock_mhz", gpu="GPU-3", cause="clock_throttle", severity="critical", mag=-20)
    kernels = [reg(kernel=f"k{i}", onset=T + H, cause="clock_throttle", evidence={"gpu_uuid": "GPU-3"}) for i in range(4)]
    other = reg(job="serve", kernel="x", cause="clock_throttle", evidence={"gpu_uuid": "GPU-5"})
    inc = group_incidents([*kernels, clock, other])
    assert len(inc) == 2
    big = inc[0]
    assert big.scope == "gpu" and big.key == "GPU-3" and len(big.members) == 5 and big.severity == "critical"
    assert inc[1].key == "GPU-5"


def test_deploy_changing_the_kernel_mix_is_one_incident():
    regs = [reg(kernel="new", series="kernel_time_share", cause="new_kernel"),
            reg(kernel="old", series="kernel_time_share", cause="kernel_vanished", onset=T + H),
            reg(kernel="gemm", cause="launch_config_changed", onset=T + 2 * H)]
    inc = group_incidents(regs)
    assert len(inc) == 1 and inc[0].cause in {"new_kernel", "kernel_vanished", "launch_config_changed"}
    assert inc[0].scope == "job" and inc[0].key == "train"


def test_unrelated_regressions_stay_apart():
    regs = [reg(kernel="a", cause="kernel_slower"),  # same job and cause but 5 h apart
            reg(kernel="b", cause="kernel_slower", onset=T + 5 * H),
            reg(job="other", kernel="a", cause="kernel_slower"),  # other job
            reg(kernel="c"),  # no cause: its own incident
            reg(kernel="d", cause="pageable_memcpy")]  # other cause
    inc = group_incidents(regs)
    assert len(inc) == 5
    assert sorted(len(i.members) for i in inc) == [1] * 5


def test_incident_id_is_stable_and_json_lists_members():
    regs = [reg(kernel=f"k{i}", cause="contention") for i in range(3)]
    a, b = group_incidents(regs)[0], group_incidents(list(reversed(regs)))[0]
    assert a.incident_id == b.incident_id
    js = a.to_json()
    assert js["cause"] == "contention" and len(js["members"]) == 3 and js["jobs"] == ["train"]
    assert group_incidents([]) == []


def test_a_lone_regression_keeps_its_event_id_and_adopted_ids_survive_growth():
    from analytics.incidents import adopt_ids

    lone = reg(kernel="solo", cause="kernel_slower")
    [inc] = group_incidents([lone])
    assert inc.incident_id == lone.event_id and inc.top is lone
    first = [reg(kernel=f"k{i}", cause="contention") for i in range(3)]
    [a] = group_incidents(first)
    grown = first + [reg(kernel="k9", cause="contention", onset=T + H)]
    [b] = group_incidents(grown)
    assert b.incident_id != a.incident_id  # membership changed the hash...
    [c] = adopt_ids([b], {r.event_id: a.incident_id for r in first})
    assert c.incident_id == a.incident_id and c.to_json()["incident_id"] == a.incident_id  # ...the recorded id stays
    # two recorded incidents linked by a later member: the smaller id wins, deterministically
    [d] = adopt_ids([b], {first[0].event_id: "bbbb", first[1].event_id: "aaaa"})
    assert d.incident_id == "aaaa"


def test_a_long_chain_of_onsets_links_step_by_step():
    """Links are between neighbours within onset_hours, so a contention that spreads over 3 h
    stays one incident, while a gap of more than onset_hours splits it."""
    spread = [reg(kernel=f"k{i}", cause="contention", onset=T + i * H) for i in range(4)]
    assert len(group_incidents(spread)) == 1
    gap = [reg(kernel="a", cause="contention"), reg(kernel="b", cause="contention", onset=T + 3 * H)]
    assert len(group_incidents(gap)) == 2


def test_where_and_cause_label_name_the_place_as_people_read_it():
    """One label for every view (report, Slack, demo): the GPU by host:index when a member knows
    it, else by uuid; a job by name; no cause reads as such."""
    import dataclasses

    clock = dataclasses.replace(reg(job="", series="gpu_sm_clock_mhz", gpu="GPU-3", cause="clock_throttle"), gpu_host="node7", gpu_index=2)
    kernel = reg(kernel="k1", cause="clock_throttle", evidence={"gpu_uuid": "GPU-3"})
    [by_label] = group_incidents([kernel, clock])
    assert (by_label.place, by_label.where, by_label.cause_label) == ("node7:2", "GPU node7:2", "clock throttle")
    [by_uuid] = group_incidents([kernel])
    assert by_uuid.where == "GPU GPU-3"
    [job] = group_incidents([reg(job="serve <x>")])
    assert (job.where, job.cause_label) == ("job serve <x>", "no common cause")


def test_a_split_incident_keeps_its_id_on_one_part_only():
    """Members once alerted together that now group apart: ids stay unique (one report anchor,
    one escalation key each)."""
    from analytics.incidents import adopt_ids

    a = reg(kernel="a", cause="contention", severity="high")
    b = reg(job="serve", kernel="b", cause="contention")
    parts = group_incidents([a, b])
    assert len(parts) == 2
    first, second = adopt_ids(parts, {a.event_id: "X", b.event_id: "X"})
    assert first.incident_id == "X" and second.incident_id == b.event_id


def test_one_gpus_contention_is_one_incident_of_that_gpu_end_to_end(tmp_path):
    """The simulator's contention injection (an intruding process on one GPU of serve-llama) through
    shards, DuckDB and the hourly path: the contention finding names the GPU, so its regressions are
    one incident of that GPU (seed 12: not looked at while writing the rule)."""
    import json

    import simulator
    from analytics.store import Store, ingest_shards
    from app.hour import catch_up

    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    simulator.simulate_fleet(tmp_path / "shards", gpus=4, hours=40, seed=12, start=start,
                             injections=simulator.parse_injections(["kind=contention,hour=30"]))
    store = Store(tmp_path / "w.duckdb")
    with store.writer() as con:
        ingest_shards(tmp_path / "shards", con)
    done = catch_up(store)
    (truth,) = json.loads((tmp_path / "shards" / "ground_truth.json").read_text())["regressions"]
    blamed = [r for r in done.regressions if r.top_cause and r.top_cause.rule == "contention"]
    assert len(blamed) >= 2
    assert {r.top_cause.evidence.get("gpu_uuid") for r in blamed} == {truth["gpu_uuid"]}
    (inc,) = [i for i in group_incidents(done.regressions) if i.cause == "contention"]
    assert (inc.scope, inc.key) == ("gpu", truth["gpu_uuid"]) and set(inc.members) >= set(blamed)


def test_late_estimated_symptoms_of_a_throttled_gpu_join_its_incident():
    """A throttled GPU slows every kernel of its job; on noisy series pooled over the job's GPUs
    the sequential detector can place that step 4-6 h after the clock's onset (228-h fleets,
    clock_throttle, seeds 8000-8001). Such kernel regressions (no cause, or kernel_slower) of the
    GPU's job within ``late_hours`` after the GPU event are its incident; the cause stays the
    throttle even when more members name kernel_slower."""
    clock = reg(job="train", series="gpu_sm_clock_mhz", gpu="GPU-3", cause="clock_throttle", conf=0.9, mag=-13)
    late = [reg(kernel="a", onset=T + 4 * H), reg(kernel="b", onset=T + 5 * H, cause="kernel_slower", conf=0.5),
            reg(kernel="c", onset=T + 6 * H, cause="kernel_slower", conf=0.5)]
    [inc] = group_incidents([clock, *late])
    assert inc.scope == "gpu" and inc.key == "GPU-3" and inc.cause == "clock_throttle" and len(inc.members) == 4
    assert inc.onset == T
    assert len(group_incidents([clock, *late], late_hours=0)) == 3  # off: the old grouping (b, c: same cause, 1 h apart)


def test_late_link_needs_same_job_a_slowing_gpu_event_and_no_other_cause():
    clock = reg(job="train", series="gpu_sm_clock_mhz", gpu="GPU-3", cause="clock_throttle", mag=-13)
    apart = [reg(kernel="a", onset=T + 7 * H),  # beyond late_hours
             reg(kernel="b", onset=T - 3 * H),  # before the GPU event
             reg(job="serve", kernel="c", onset=T + 3 * H),  # another job
             reg(kernel="d", onset=T + 3 * H, cause="new_kernel"),  # a cause of its own: a deploy
             reg(kernel="e", series="memcpy_ns_per_byte", onset=T + 4 * H, cause="pageable_memcpy")]
    inc = group_incidents([clock, *apart])
    assert len(inc) == 6 and all(len(i.members) == 1 for i in inc)
    idle = reg(job="train", series="job_busy_share", kernel=None, cause="gpu_idle_gaps", evidence={"gpu_uuid": "GPU-3"})
    assert len(group_incidents([idle, reg(kernel="f", onset=T + 3 * H)])) == 2  # idle gaps do not slow kernels
    contended = reg(job="train", kernel="g", cause="contention", evidence={"gpu_uuid": "GPU-5"})
    [inc] = group_incidents([contended, reg(kernel="h", onset=T + 3 * H, cause="kernel_slower")])
    assert inc.cause == "contention" and inc.key == "GPU-5"


def test_a_late_symptom_joins_the_nearest_gpu_event_only_and_may_share_its_hour():
    # two GPUs of one job throttled 5 h apart stay two incidents: a symptom after both joins the later one
    first = reg(job="train", series="gpu_sm_clock_mhz", gpu="GPU-1", cause="clock_throttle", mag=-13)
    second = reg(job="train", series="gpu_sm_clock_mhz", gpu="GPU-2", cause="clock_throttle", mag=-13, onset=T + 5 * H)
    symptom = reg(kernel="a", onset=T + 5 * H + dt.timedelta(minutes=30))
    inc = group_incidents([first, second, symptom])
    assert sorted((i.key, len(i.members)) for i in inc) == [("GPU-1", 1), ("GPU-2", 2)]
    # a symptom estimated at the GPU event's own hour is its symptom too
    [same] = group_incidents([first, reg(kernel="b", onset=T)])
    assert same.key == "GPU-1" and len(same.members) == 2
