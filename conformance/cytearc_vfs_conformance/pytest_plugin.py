"""pytest plugin of the conformance suite: rule and pending markers, outcomes.

Load it with ``pytest_plugins = ["cytearc_vfs_conformance.pytest_plugin"]``
in a ``conftest.py`` (or ``-p cytearc_vfs_conformance.pytest_plugin``).

- ``@pytest.mark.rule(id)`` ties a test to a rule of ``rules.json``.
- ``@pytest.mark.pending(what)`` marks a test whose fix is in flight
  elsewhere: it runs as a non-strict ``xfail``, so it may pass already, and
  the report shows it as pending until the marker is removed.
- When ``CYTEARC_CONFORMANCE_REPORT`` names a directory, each rule test's
  outcome is written to ``{directory}/rule_outcomes.json`` at the end of the
  session, for the report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        pending = item.get_closest_marker("pending")
        if pending is not None:
            what = pending.args[0] if pending.args else "a fix in flight"
            item.add_marker(pytest.mark.xfail(strict=False, reason=f"pending: {what}"))


def _status(item: pytest.Item, report: pytest.TestReport) -> str | None:
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            return "pending" if report.skipped else "passed (pending marker can go)"
        if report.skipped:
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else ""
            return f"skipped: {reason}"
        return report.outcome
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    marker = item.get_closest_marker("rule")
    pending = item.get_closest_marker("pending")
    status = _status(item, report) if marker is not None or pending is not None else None
    if status is not None:
        # rule tests by rule id; other pending checks by test id, for the report
        key = str(marker.args[0]) if marker is not None else f"test:{item.nodeid}"
        item.config.stash[_OUTCOMES][key] = {
            "test": item.nodeid,
            "status": status,
            "pending": str(pending.args[0]) if pending is not None and pending.args else "",
        }
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    directory = os.environ.get(ENV)
    outcomes: dict[str, Any] = session.config.stash.get(_OUTCOMES, {})
    if directory and outcomes:
        path = Path(directory) / OUTCOMES_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(outcomes, indent=1, sort_keys=True) + "\n", encoding="utf-8")
