"""Repository-wide pytest settings. In CI (CI set) a skipped test fails the run: a test that cannot
run there is a gap in what CI proves. Tests that do not apply to a cluster are deselected at
collection instead (e2e/conftest.py), which is reported but not a skip."""

from __future__ import annotations

import os

import pytest

# Every CDI spec a test builds is schema-checked (dra_fake.core.cdi.checked; off in the plugins).
os.environ.setdefault("DRA_FAKE_CHECK_CDI_SPECS", "1")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not os.environ.get("CI"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        if reporter:
            reporter.write_line(f"CI: {len(skipped)} test(s) skipped; a skip is a failure here", red=True)
            for report in skipped[:20]:
                reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else ""
                reporter.write_line(f"  skipped: {report.nodeid} ({reason})")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
