"""``batchscope autopilot``: the policy, the shift rule, and the loop on a real Triton.

The policy and the rule are checked on known inputs. The loop runs on a private real Triton
kept by the stack's supervisor (SIGKILLed, it is started again, as `batchscope up` does),
under open-loop load from the load generator; Triton's config endpoint is the observer of
what the model serves, the store's ``config_changes`` of what was recorded. Intervals are 3 s
and searches small to bound the tests' time.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from advisor import advice
from advisor.advice import SearchOptions
from advisor.config import BatcherConfig, from_model_config
from advisor.inputs import Costs, Inputs, Options, Prepared
from advisor.model import CpuModel, OpenLoop, ServiceModel
from advisor.predict import SearchSpace
from autopilot import loop
from autopilot.policy import Policy, PolicyError, load, parse
from batchscope.main import main
from runs.changes import Change
from runs.store import RunStore
from stack.supervisor import Supervisor, running
from stacksettings import isolated
from tests.autopilot.test_autopilot import MODEL, SPEC, live
from tests.autopilot.test_autopilot_restart import served_from_repository, supervised_traffic
from tritonapi.client import TritonClient

# ---- the policy -----------------------------------------------------------------------------


def test_a_policy_file_loads_into_its_bounds(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "max_queue_delay_microseconds: {min: 100, max: 300}\n"
        "max_batch_size: {max: 2}\n"
        "preferred_batch_sizes: [2]\n"
        "instance_count: {max: 1}\n"
        "min_minutes_between_changes: 0.5\n"
        "never_touch: [mlp_model]\n"
    )
    assert load(path) == Policy(100, 300, 2, (2,), 1, 0.5, frozenset({"mlp_model"}))
    assert parse(None) == Policy()  # an empty file: no bounds, the default spacing
    assert parse({"preferred_batch_sizes": "any"}).preferred is None


def test_each_bad_field_is_one_line_and_the_cli_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "max_queue_delay_microseconds: {min: 500, max: 100}\n"
        "max_batch_size: 32\n"
        "preferred_batch_sizes: [4, two]\n"
        "instance_count: {max: 0}\n"
        "min_minutes_between_changes: -1\n"
        "never_touch: mlp_model\n"
        "max_delay: 3\n"
    )
    with pytest.raises(PolicyError) as exc:
        load(path)
    lines = str(exc.value).splitlines()
    where = f"--policy {path}: "
    assert [line.removeprefix(where).split(":")[0] for line in lines] == [
        "max_delay",
        "max_queue_delay_microseconds",
        "max_batch_size",
        "instance_count.max",
        "preferred_batch_sizes",
        "min_minutes_between_changes",
        "never_touch",
    ]
    assert all(line.startswith(where) for line in lines)
    assert "e.g. max_batch_size: {max: 32}" in lines[2]
    url = "http://127.0.0.1:1"  # never asked: the policy is refused first
    code = main(
        ["autopilot", "--url", url, "--model", MODEL, "--p99-ms", "5", "--policy", str(path)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 7
    assert all(line.startswith(f"batchscope autopilot: error: {where}") for line in err)
    assert err[-1].endswith(" (see 'batchscope autopilot --help')")
    path.write_text("max_batch_size: max: 2\n")
    with pytest.raises(PolicyError, match="not valid YAML at line 1"):
        load(path)


def test_the_policy_cuts_the_search_space_and_adds_its_edges() -> None:
    policy = Policy(min_delay_us=300, max_delay_us=1500, max_batch_size=24, preferred=(8, 24))
    current = BatcherConfig(64, (), 5000, 2)
    space = policy.restrict(SearchSpace(), current)
    assert space.max_batch_sizes == (2, 4, 8, 16, 24)  # 1 has no delay to bound
    assert space.delays_us == (300, 500, 1000, 1500)
    configs = list(space.configs(current))
    assert configs and all(policy.outside(c) == [] for c in configs)
    assert {c.preferred_batch_sizes for c in configs} == {(), (8,), (8, 24)}
    # An instance bound under the current count moves the search to the bound.
    assert Policy(max_instances=1).restrict(SearchSpace(), current).instance_counts(current) == (1,)
    assert policy.outside(current) == [
        "delay 5000 us over the maximum 1500",
        "max_batch_size 64 over the maximum 24",
    ]


def test_a_bound_the_unconstrained_advice_exceeds_is_respected_by_the_search() -> None:
    """The same inputs searched twice: free, the advisor wants a bigger batch and no delay;
    within the policy, the one search picks among the configs the policy allows."""
    current = BatcherConfig(4, (4,), 20_000, 1)
    inputs = Inputs(current, ServiceModel(0.0006, 0.00004), OpenLoop(400.0, 1.0), [])
    prepared = Prepared(inputs, Costs(CpuModel(), "given"), "")
    quick = SearchOptions(p99_bound_s=0.02, requests=800, seeds=2)
    free = advice.search(prepared, quick).recommendation
    assert free.best is not None and not free.keep
    policy = Policy(min_delay_us=100, max_delay_us=300, max_batch_size=2)
    assert policy.outside(free.best.config)  # the free advice is outside the bounds
    bound = advice.search(prepared, SearchOptions(**{**quick.__dict__, "policy": policy}))
    rec = bound.recommendation
    assert rec.best is not None and not rec.keep
    assert policy.outside(rec.best.config) == []
    assert any(n.startswith("searched within the policy: delay 100..300 us") for n in bound.notes)


def test_a_shift_is_a_rate_beyond_x1_5_or_a_burstiness_beyond_0_5() -> None:
    base = OpenLoop(100.0, 1.0)
    assert loop.shift(base, OpenLoop(140.0, 1.3)) == ""
    assert loop.shift(base, OpenLoop(160.0, 1.0)) == "rate x1.60"
    assert loop.shift(base, OpenLoop(60.0, 1.0)) == "rate x0.60"
    assert loop.shift(base, OpenLoop(100.0, 1.6)) == "burstiness 1.00 -> 1.60"


def test_ctrl_c_during_a_change_is_held_until_the_change_is_done() -> None:
    # Python's own Ctrl-C handler, as in a terminal: a process started in the background by
    # a non-interactive shell (a CI runner's, say) inherits SIGINT ignored, and keeps it.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    finished = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with loop.deferred_interrupt():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)  # the signal arrives here, and is only noted
                finished.append(True)
        assert finished == [True]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, inherited)


# ---- on a real Triton -------------------------------------------------------------------------

SLOW = BatcherConfig(4, (), 20_000, 1)  # Triton reads no preferred sizes as [4]
QUICK = ["--requests", "800", "--seeds", "2", "--cores", "2", "--request-us", "100"]
# The tests that ask for a decision on SLOW watch 6 s, not 3: a stall of the machine in a
# 3 s window (450 requests) weighs twice as much on Triton's queue, and so on the release
# the present calibrates to (LOADED_RELEASE_MS).
DECIDING = ["--interval-s", "6"]
# Where SLOW's 20 ms delay forms the batches, the window tells little of the time an instance
# stays unavailable after an execution: any release up to several ms reproduces it. On a
# quiet machine the present is calibrated with none and a config without the delay wins by
# far; in a new clone's whole run (2026-12-07, the machine slow enough that the suite took
# 805 s) Triton's queue was longer, the present calibrated with 7 and 11 ms, and with that
# no config beat SLOW by x1.2: KEEP, the advisor's answer to that window. In CI's run of
# that code the present calibrated with 13.55 ms, and with that no config met the bound at
# all: NO CHANGE. The two tests then check that this is the answer's reason, and that
# nothing changed.
LOADED_RELEASE_MS = 2.0
# What the loop says where the loaded present leaves no config meeting the bound.
NONE_MEETS = f"NO CHANGE {MODEL}: no config within the policy meets p99 <= "


def inferred_release_ms(present: str) -> float:
    """The release a present line says was inferred, in ms (0 when none is said)."""
    found = re.search(r"inferred: ([0-9.]+) ms unavailable after each execution", present)
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    settings = isolated(tmp_path_factory.mktemp("pilot"))
    with running(settings, only=("triton",), supervise=True) as kept:
        yield kept


@pytest.fixture
def client(supervisor: Supervisor) -> TritonClient:
    return served_from_repository(supervisor)


@pytest.fixture
def traffic(supervisor: Supervisor, tmp_path: Path) -> Iterator[Path]:
    with supervised_traffic(supervisor, tmp_path / "runs.sqlite3", 60.0, seed=13) as db:
        yield db


def autopilot(
    capsys: pytest.CaptureFixture[str], supervisor: Supervisor, db: Path, *argv: str
) -> tuple[int, list[str], str]:
    settings = supervisor.settings
    code = main(
        [
            "autopilot",
            "--url",
            settings.url("triton_http"),
            "--model",
            MODEL,
            # Well above the p99 SLOW's own 20 ms delay makes (about 21 ms). On a loaded
            # machine the present calibrates with milliseconds unavailable after each
            # execution, the machine's, and then no config met a 20 ms bound (a whole run
            # of present4: "NO CHANGE ...: no config within the policy meets p99 <= 20
            # ms"): the autopilot's right answer there, not what these tests are about.
            "--p99-ms",
            "50",
            "--interval-s",
            "3",
            "--metrics-url",
            f"{settings.url('triton_metrics')}/metrics",
            "--db",
            str(db),
            "--admin-key-file",
            str(settings.admin_key_file),
            "--calibrations",
            str(db.parent / "calibrations.json"),
            *QUICK,
            *argv,
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def served_for_a_moment(client: TritonClient, config: BatcherConfig) -> None:
    """Serve ``config`` and let the traffic run under it for a moment: a window that began
    during the reload would hold the requests queued across it, which the advisor's present
    (the served config simulated against the window) would read as the instance's own."""
    client.load_model(MODEL, live(client, config))
    time.sleep(1.5)


@pytest.mark.integration
def test_the_dry_run_prints_the_decision_and_changes_nothing(
    supervisor: Supervisor,
    client: TritonClient,
    traffic: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served_for_a_moment(client, SLOW)
    code, out, err = autopilot(capsys, supervisor, traffic, "--once", *DECIDING)
    said = "\n".join(out)  # every line whole in a failure's message (a list's repr is cut)
    assert code == 0, err
    assert out[0].startswith(f"autopilot {MODEL} at {client.url}: dry run (--apply changes")
    assert out[0].endswith(
        "traffic from the requests received (Triton's metrics at "
        f"{supervisor.settings.url('triton_metrics')}/metrics)"
    ), out[0]
    assert out[1].startswith(f"{MODEL}: traffic 1") and out[1].endswith("no advice yet: advising")
    # The advisor's present, simulated against the interval, before any decision.
    assert out[2].startswith(f"{MODEL}: present: batch "), said
    decision = out[3]
    if decision.startswith((f"KEEP {MODEL}: {SLOW.describe()}; ", NONE_MEETS)):
        assert inferred_release_ms(out[2]) >= LOADED_RELEASE_MS, said
    else:
        assert decision.startswith(f"DRY RUN {MODEL}: would apply {SLOW.describe()} -> "), said
        assert decision.endswith("; --apply does it"), said
    assert len(out) == 4, said
    assert from_model_config(client.model_config_json(MODEL)) == SLOW  # nothing changed
    with RunStore(traffic) as store:
        assert store.list_changes() == []


@pytest.mark.integration
def test_apply_keeps_within_the_policy(
    supervisor: Supervisor,
    client: TritonClient,
    traffic: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served_for_a_moment(client, SLOW)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "max_queue_delay_microseconds: {min: 100, max: 300}\nmax_batch_size: {max: 2}\n"
    )
    argv = ["--once", "--apply", "--watch-s", "3", "--policy", str(policy), *DECIDING]
    code, out, err = autopilot(capsys, supervisor, traffic, *argv)
    said = "\n".join(["the autopilot said:", *out, err])  # every line whole
    with RunStore(traffic) as store:
        changes = store.list_changes(MODEL)
    if not changes:  # KEEP or NO CHANGE, from a present calibrated under load
        (present,) = [line for line in out if line.startswith(f"{MODEL}: present: ")]
        assert inferred_release_ms(present) >= LOADED_RELEASE_MS, said
        if not out[-1].startswith(NONE_MEETS):
            assert out[-1].startswith(f"KEEP {MODEL}: {SLOW.describe()}; "), said
            assert out[-1].endswith("over the maximum 2)"), said  # itself outside the policy
        assert code == 0 and from_model_config(client.model_config_json(MODEL)) == SLOW, said
        return
    assert len(changes) == 1, said
    (change,) = changes
    applied = from_model_config(change.new_config)
    assert load(policy).outside(applied) == [], applied.describe()
    assert applied.max_batch_size <= 2 and 100 <= applied.max_queue_delay_us <= 300
    # Kept or (on a busy machine) rolled back: the served config, the exit code and the
    # record agree.
    assert change.outcome in ("kept", "rolled_back"), change.reason
    served = from_model_config(client.model_config_json(MODEL))
    assert served == (applied if change.outcome == "kept" else SLOW)
    assert code == (0 if change.outcome == "kept" else 1), err
    assert out[-1].startswith(("KEPT", "ROLLED BACK"))
    # What it applies is said before the watch begins, with its prediction.
    (applying,) = [line for line in out if line.startswith("APPLY")]
    assert applying.startswith(f"APPLY {MODEL}: {SLOW.describe()} -> {applied.describe()}; "), out
    assert "predicted client p99 " in applying, out


@pytest.mark.integration
def test_a_never_touch_model_is_refused_before_anything_is_watched(
    supervisor: Supervisor, client: TritonClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"never_touch: [{MODEL}]\n")
    started = time.monotonic()
    code, out, err = autopilot(
        capsys, supervisor, tmp_path / "runs.sqlite3", "--apply", "--policy", str(policy)
    )
    assert code == 2 and out == []
    assert err.strip().splitlines() == [
        f"batchscope autopilot: error: autopilot: {MODEL} is in the policy's never_touch list; "
        "nothing is watched or changed (remove it from never_touch to pilot it)"
        " (see 'batchscope autopilot --help')"
    ]
    assert time.monotonic() - started < 5  # before any interval
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC


@pytest.mark.integration
def test_after_a_restart_the_kept_config_is_applied_again(
    supervisor: Supervisor, client: TritonClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    old = client.model_config_json(MODEL)
    kept = BatcherConfig(4, (2, 4), 0, 1)
    new = live(client, kept)
    client.load_model(MODEL, new)
    assert from_model_config(client.model_config_json(MODEL)) == kept
    with RunStore(db, create=True) as store:  # as advise --apply records a kept change
        first = store.record_change(
            Change(client.url, MODEL, old, new, {}, {}, {}, "kept", "client p99 fine")
        )
    pid = supervisor.children["triton"].pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        child = supervisor.children.get("triton")
        if child is not None and child.pid != pid and client.is_ready():
            break
        time.sleep(0.2)
    while MODEL not in client.ready_models() and time.monotonic() < deadline:
        time.sleep(0.2)
    # The restarted Triton serves config.pbtxt: the override is gone.
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    code, out, err = autopilot(capsys, supervisor, db, "--once")
    assert code == 0, err
    assert out[1] == (
        f"GONE {MODEL}: the kept config of change #{first} ({kept.describe()}) is gone: "
        f"Triton serves {SPEC} (a restarted Triton serves config.pbtxt); --apply loads it again"
    )
    assert out[2].startswith(f"{MODEL}: traffic not measured")  # no load: goes on to measure
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    code, out, err = autopilot(capsys, supervisor, db, "--once", "--apply")
    assert code == 0, err
    assert out[1].startswith(f"REAPPLIED {MODEL}: the kept config of change #{first}")
    assert out[1].endswith("; loaded it again") and len(out) == 2
    assert from_model_config(client.model_config_json(MODEL)) == kept
    with RunStore(db) as store:
        newest, _ = store.list_changes(MODEL)
    assert newest.outcome == "reapplied" and newest.new_config == new
    assert from_model_config(newest.old_config).describe() == SPEC


def pilot_options(supervisor: Supervisor, db: Path, **more: Any) -> loop.PilotOptions:
    """The autopilot of the shift tests: 4 s intervals, a small search, a policy that allows
    a change at any time (so that no second change is the autopilot's choice, not the
    policy's), the store ``db``, the stack's admin key."""
    url = supervisor.settings.url("triton_http")
    return loop.PilotOptions(
        url=url,
        model=MODEL,
        policy=Policy(min_minutes_between_changes=0),
        # 50 ms, as autopilot()'s: a 20 ms bound may be met by no config on a loaded machine.
        search=SearchOptions(p99_bound_s=0.05, requests=800, seeds=2),
        inputs=Options(
            url=url, model=MODEL, cores=2, request_us=100, calibrations=db.parent / "c.json"
        ),
        interval_s=4.0,
        store=db,
        headers=supervisor.settings.admin_headers(),
        **more,
    )


def rate_traffic(supervisor: Supervisor, rate: float, db: Path) -> Any:
    return supervised_traffic(supervisor, db, 40.0, seed=17, rate=rate)


@pytest.mark.integration
def test_a_sustained_shift_re_advises_and_a_steady_rate_does_not(
    supervisor: Supervisor, client: TritonClient, tmp_path: Path
) -> None:
    """40/s, then 240/s (low rates: the load and Triton share 2 cores), one dry-run step at
    a time: the first step advises, a steady one does not, the shift is advised on at its
    second interval, and the config is then taken as chosen for the new rate (or, where the
    advisor does not reproduce the shifted window, nothing is applied and it is not)."""
    db = tmp_path / "runs.sqlite3"
    opts = pilot_options(supervisor, db)
    lines: list[str] = []
    steps = loop.Pilot(opts, lines.append)
    with rate_traffic(supervisor, 40.0, db):
        steps.step()
        steps.step()
    said = "\n".join(lines)  # every line whole in a failure's message
    assert lines[0].endswith("no advice yet: advising"), said
    assert lines[1].startswith(f"{MODEL}: present: batch "), said  # before the decision
    assert lines[2].startswith(("DRY RUN", "KEEP")), said
    # Steady: no advice. (Its burstiness alone may read as shifted, 1 of 2, in about 3 % of
    # intervals by chance: never the rate, never an advice.)
    assert "advising" not in lines[3] and "rate x" not in lines[3], said
    assert steps.baseline is not None and 30 < steps.baseline.rate_per_s < 50
    with rate_traffic(supervisor, 240.0, db.with_name("runs2.sqlite3")):
        steps.step()
        steps.step()
    said = "\n".join(lines)
    assert "shifted (rate x" in lines[4], said
    advised = [i for i, line in enumerate(lines) if line.endswith("for 2 intervals: advising")]
    # One advice on the shift, and never at its first shifted interval.
    assert len(advised) == 1 and lines[advised[0] - 1].endswith("interval 1 of 2"), said
    assert lines[advised[0] + 1].startswith(f"{MODEL}: present: batch "), said
    decision = lines[advised[0] + 2]
    if decision.startswith("NO ADVICE"):
        # The advisor's other answer: the shifted window not reproduced. In whole runs of
        # the suite the other workers' load made Triton's queue at 240/s several times what
        # any simulation of its batches gives (docs/validation/suite-time.md). Then nothing
        # is applied and the config is not taken as chosen for the new rate, so that the
        # next interval advises again.
        assert "(present off): nothing applied" in decision, said
        assert 30 < steps.baseline.rate_per_s < 50, said
    else:
        assert decision.startswith(("DRY RUN", "KEEP", "WAIT")), said
        assert 180 < steps.baseline.rate_per_s < 300  # chosen for the new rate now
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC  # dry run


@pytest.mark.integration
def test_a_kept_config_that_no_longer_loads_is_recorded_as_reapply_failed(
    supervisor: Supervisor, client: TritonClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store's kept config asks for a GPU this machine lacks: the re-apply fails, Triton
    keeps serving what it served, and the record and the exit code say so."""
    db = tmp_path / "runs.sqlite3"
    old = client.model_config_json(MODEL)
    # Another batching (no delay), on a GPU instance.
    gpu = {
        **live(client, BatcherConfig(4, (2, 4), 0, 1)),
        "instance_group": [{"name": MODEL, "kind": "KIND_GPU", "count": 1}],
    }
    with RunStore(db, create=True) as store:
        first = store.record_change(Change(client.url, MODEL, old, gpu, {}, {}, {}, "kept", "ok"))
    code, out, err = autopilot(capsys, supervisor, db, "--once", "--apply")
    assert code == 1, err
    assert out[1].startswith(f"REAPPLY FAILED {MODEL}: the kept config of change #{first}")
    assert "KIND_GPU but no GPUs are available" in out[1]
    assert out[1].endswith("(not tried again by this run)") and len(out) == 2
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    assert MODEL in client.ready_models()
    with RunStore(db) as store:
        newest, _ = store.list_changes(MODEL)
    assert newest.outcome == "reapply_failed" and newest.new_config == gpu
