"""The advisor panel's "Apply with rollback": ``batchscope advise --apply`` from the page.

The same steps and rule as the CLI (:func:`autopilot.apply.apply_and_watch`): the
recommended config is loaded on the live model as a config override, watched against the
window before it, and kept or rolled back by itself; the change goes on the store's record.
It runs in a thread, one at a time for the whole dashboard process (two changes at once to
one server would judge each other's windows), and the page polls its progress lines.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.predict import Prediction
from autopilot import apply
from tritonapi.client import TritonClient, TritonError

# The page's bounds on the watch window: at least the CLI's shortest default, at most its
# longest (a click holds the server's one change slot for twice this).
MIN_WATCH_S = 3.0
MAX_WATCH_S = apply.MAX_WATCH_S


class ApplyRefused(ValueError):
    """Nothing was changed: one line saying why and what to do."""


@dataclass
class ActiveChange:
    model: str
    server: str
    new: str  # the config applied, described
    started: float = field(default_factory=time.time)
    lines: list[str] = field(default_factory=list)  # progress, as the CLI prints it
    result: apply.Result | None = None
    error: str = ""  # refused before any change (no traffic, the server gone)
    done: threading.Event = field(default_factory=threading.Event)


class ApplyManager:
    """At most one change being applied and watched at a time, for every tab."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.current: ActiveChange | None = None

    @property
    def busy(self) -> bool:
        return self.current is not None and not self.current.done.is_set()

    def start(
        self,
        client: TritonClient,
        model: str,
        best: Prediction,
        watch_s: float,
        store: Path,
    ) -> ActiveChange:
        """Check what can be checked before anything changes (the repository API and the
        key, the kind of model), then apply and watch in a thread. ApplyRefused otherwise."""
        if not MIN_WATCH_S <= watch_s <= MAX_WATCH_S:
            raise ApplyRefused(
                f"the watch window must be {MIN_WATCH_S:g} to {MAX_WATCH_S:g} s, got {watch_s:g}"
            )
        try:
            apply.check_access(client)
            old = client.model_config_json(model)
            apply.check_model(old)
        except apply.ApplyRefused as exc:
            raise ApplyRefused(str(exc).removeprefix("--apply: ")) from None
        except TritonError as exc:
            raise ApplyRefused(f"{exc}; nothing was changed") from None
        new = apply.override(old, best.config, model)
        with self._lock:
            if self.busy:
                raise ApplyRefused("a change is being watched already: wait for its outcome")
            active = ActiveChange(model, client.url, best.config.describe())
            self.current = active
        thread = threading.Thread(
            target=self._run,
            args=(active, client, old, new, best, watch_s, store),
            name="dashboard-apply",
            daemon=True,
        )
        thread.start()
        return active

    def _run(
        self,
        active: ActiveChange,
        client: TritonClient,
        old: dict[str, Any],
        new: dict[str, Any],
        best: Prediction,
        watch_s: float,
        store: Path,
    ) -> None:
        try:
            active.result = apply.apply_and_watch(
                client,
                active.model,
                old,
                new,
                apply.Predicted.of(best),
                watch_s,
                store=store,
                say=active.lines.append,
            )
        except apply.ApplyRefused as exc:
            active.error = str(exc).removeprefix("--apply: ")
        except Exception as exc:  # the thread must always finish and say why
            active.error = f"{type(exc).__name__}: {exc}"
        finally:
            active.done.set()
