"""The fault matrix's summary: every cell run in this session, printed at the end (``make faults``)."""

from __future__ import annotations

from typing import Any

from rmq.testing import faults


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if faults.RESULTS:
        terminalreporter.section("fault matrix")
        terminalreporter.write_line(faults.format_matrix(faults.RESULTS))
