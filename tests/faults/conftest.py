"""The fault matrix's summary: every cell run in this session, printed at the end (``make faults``).

Each cell reports its figures as a property of its test report, so the table is complete also when the
cells run under pytest-xdist (reports reach the controlling process; module state does not)."""

from __future__ import annotations

from typing import Any

from rmq.testing import faults


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call":
        faults.RESULTS.extend(faults.CellResult(**value) for name, value in report.user_properties
                              if name == faults.CELL_PROPERTY)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if faults.RESULTS:
        terminalreporter.section("fault matrix")
        first: dict[str, int] = {}
        for i, r in enumerate(faults.RESULTS):
            first.setdefault(r.flow, i)
        # a flow's cells together (xdist reports them as they finish), each flow's in the order they ran
        terminalreporter.write_line(faults.format_matrix(sorted(faults.RESULTS, key=lambda r: first[r.flow])))
