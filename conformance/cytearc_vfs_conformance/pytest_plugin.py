"""pytest plugin of the conformance suite: rule and pending markers, outcomes.

Load it with ``pytest_plugins = ["cytearc_vfs_conformance.pytest_plugin"]``
in a ``conftest.py`` (or ``-p cytearc_vfs_conformance.pytest_plugin``).

- ``@pytest.mark.rule(id)`` ties a test to a rule of ``rules.json``.
- ``@pytest.mark.pending(what)`` marks a test whose fix is in flight
  elsewhere: it runs as a non-strict ``xfail``, so it may pass already, and
  the report shows it as pending until the marker is removed.
- When ``CYTEARC_CONFORMANCE_REPORT`` names a directory, each rule's
  outcome is written to ``{directory}/rule_outcomes.json`` at the end of the
  session, for the report. A rule with several tests (or a parametrized
  test) gets the worst of their outcomes: one failing case fails the rule.
  Under pytest-xdist the outcomes travel with the test reports to the
  controller, which alone writes the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest

from .families import ENV

__all__ = ["OUTCOMES_FILE"]

OUTCOMES_FILE = "rule_outcomes.json"
_OUTCOMES = pytest.StashKey[dict[str, dict[str, str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule(id): the test checks the spec rule `id` (rules.json)")
    config.addinivalue_line(
        "markers", "pending(what): a fix in flight elsewhere; runs as a non-strict xfail"
    )
    config.stash[_OUTCOMES] = {}
    config.pluginmanager.register(_Recorder(config), "cytearc-conformance-recorder")


_PROPERTY = "cytearc_conformance"

# Worst first: the outcome a rule shows when its tests disagree.
_SEVERITY = ("failed", "skipped", "pending", "passed (pending marker can go)", "passed")


def _severity(status: str) -> int:
    for rank, prefix in enumerate(_SEVERITY):
        if status.startswith(prefix):
            return rank
    return 0  # an outcome of unknown kind is no pass


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        rule = item.get_closest_marker("rule")
        pending = item.get_closest_marker("pending")
        if pending is not None:
            what = pending.args[0] if pending.args else "a fix in flight"
            item.add_marker(pytest.mark.xfail(strict=False, reason=f"pending: {what}"))
        if rule is not None or pending is not None:
            # carried by every report of the item, to xdist's controller too
            item.user_properties.append(
                (
                    _PROPERTY,
                    {
                        # rule tests by rule id; other pending checks by test id
                        "key": str(rule.args[0]) if rule is not None else f"test:{item.nodeid}",
                        "pending": str(pending.args[0])
                        if pending is not None and pending.args
                        else "",
                    },
                )
            )


def _status(report: pytest.TestReport) -> str | None:
    """The outcome a report tells, or ``None`` (setup and teardown that went well)."""
    if report.when != "call" and (report.passed or (report.skipped and report.when == "teardown")):
        return None
    if hasattr(report, "wasxfail"):
        return "pending" if report.skipped else "passed (pending marker can go)"
    if report.skipped:
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else ""
        return f"skipped: {reason}"
    return report.outcome


class _Recorder:
    """Gathers the rules' outcomes from the test reports and writes them at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # runs where the reports arrive: in the one process, or in xdist's controller
        found: list[dict[str, str]] = [
            cast(dict[str, str], value)
            for name, value in report.user_properties
            if name == _PROPERTY
        ]
        status = _status(report) if found else None
        if status is None:
            return
        key, pending = found[0]["key"], found[0]["pending"]
        outcomes = self._config.stash[_OUTCOMES]
        known = outcomes.get(key)
        if known is None or _severity(status) < _severity(known["status"]):
            outcomes[key] = {"test": report.nodeid, "status": status, "pending": pending}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # an xdist worker: its reports went to the controller, which writes
        directory = os.environ.get(ENV)
        outcomes: dict[str, Any] = session.config.stash.get(_OUTCOMES, {})
        if directory and outcomes:
            path = Path(directory) / OUTCOMES_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            text = json.dumps(outcomes, indent=1, sort_keys=True) + "\n"
            path.write_text(text, encoding="utf-8")
