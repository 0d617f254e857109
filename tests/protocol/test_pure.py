"""``rmq.protocol`` stays sans-IO (DESIGN rule 8): codecs and checks over values the caller hands in.

Every ``protocol/*.py`` is parsed, not imported, and must not: import a module whose job is I/O or
processes (subprocess, ssl, asyncio, ...); use ``socket`` beyond its address codecs (``inet_pton`` and
kin are pure functions); use ``os`` beyond the process id, random bytes and ``getenv``; call ``open`` or a
``pathlib`` method that touches the filesystem. A socket, a file or a child process belongs to the
transport, the plugin or the daemon that uses it; a docstring may still mention them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROTOCOL = Path(__file__).resolve().parents[2] / "protocol"
FILES = sorted(PROTOCOL.glob("*.py"))

IO_MODULES = {
    "subprocess", "ssl", "asyncio", "anyio", "selectors", "shutil", "tempfile", "multiprocessing", "mmap",
    "glob", "io", "fcntl", "signal", "urllib.request", "http.client", "ftplib", "smtplib",
}
SOCKET_PURE = {"inet_pton", "inet_ntop", "inet_aton", "inet_ntoa", "AF_INET", "AF_INET6"}
OS_PURE = {"getpid", "urandom", "getenv"}  # getenv: a setting read once (RMQ_PURE), not I/O
PATH_IO = {
    "read_text", "read_bytes", "write_text", "write_bytes", "open", "touch", "unlink", "mkdir", "rmdir",
    "iterdir", "glob", "rglob", "exists", "is_file", "is_dir", "stat", "lstat", "chmod", "symlink_to",
    "readlink", "samefile",
}


def io_uses(source: str) -> list[str]:
    """``line: what`` for every I/O the code does or imports (docstrings and comments aside)."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _io_module(a.name)]
            found += [f"{node.lineno}: import {a.name} as {a.asname}" for a in node.names
                      if a.asname and a.name in ("os", "socket")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _io_module(node.module):
                found.append(f"{node.lineno}: from {node.module} import ...")
            pure = {"socket": SOCKET_PURE, "os": OS_PURE}.get(node.module)
            if pure is not None:
                found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names
                          if a.name not in pure]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            pure = {"socket": SOCKET_PURE, "os": OS_PURE}.get(node.value.id)
            if pure is not None and node.attr not in pure:
                found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id == "open":
                found.append(f"{node.lineno}: open(...)")
            elif isinstance(fn, ast.Attribute) and fn.attr in PATH_IO:
                found.append(f"{node.lineno}: .{fn.attr}(...)")
    return found


def _io_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in IO_MODULES)


def test_every_protocol_module_is_checked() -> None:
    assert {"command.py", "tls.py", "ports.py", "message.py", "tomledit.py"} <= {p.name for p in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_protocol_module_does_no_io(path: Path) -> None:
    found = io_uses(path.read_text(encoding="utf-8"))
    assert not found, f"protocol/{path.name} does I/O (move it to the transport, the plugin or the daemon): {found}"


def test_the_checker_sees_io() -> None:
    """The rule itself: each kind of I/O is caught, the pure uses are not."""
    src = (
        "import subprocess\nimport socket\nimport os\nfrom pathlib import Path\n"
        "subprocess.run(['x'])\nsocket.socket()\nos.replace('a', 'b')\nopen('f')\nPath('f').read_text()\n"
        "socket.inet_pton(socket.AF_INET, '1.2.3.4')\nos.getpid()\n'a'.replace('a', 'b')\n"
    )
    found = sorted(f.split(": ", 1)[1] for f in io_uses(src))
    assert found == sorted(["import subprocess", "socket.socket", "os.replace", "open(...)", ".read_text(...)"])
