"""A PostgreSQL server for the storage tests: the one ``TENSORLANG_TEST_POSTGRES`` names (a URL;
``.ci/run`` starts one on 127.0.0.1), else a throwaway server started here from Debian's
``postgresql`` binaries (``initdb``, ``pg_ctl``) in a temporary directory on a free port of
127.0.0.1, run as the ``postgres`` user when the tests run as root (the server refuses root).
Where no server binary exists the test is skipped, naming the package to install."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from typing import Iterator

import pytest


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                      key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return versions[-1] if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_url() -> Iterator[str]:
    """Yield the URL (``postgresql://user@127.0.0.1:port/postgres``) of a running server."""
    given = os.environ.get("TENSORLANG_TEST_POSTGRES")
    if given:
        yield given
        return
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binary (initdb, pg_ctl) on this machine: "
                    "apt-get install postgresql, or set TENSORLANG_TEST_POSTGRES to a URL")
    run_as: list[str] = []
    home = tempfile.mkdtemp(prefix="tensorlang-pg-")
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(home, ignore_errors=True)
            pytest.skip("running as root and no 'postgres' user to run the server as")
        os.chown(home, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(home, "data"), _free_port()
    try:
        subprocess.run([*run_as, initdb, "-D", data, "-A", "trust", "-U", "tensorlang",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True, timeout=120)
        subprocess.run([*run_as, pg_ctl, "-D", data, "-l", os.path.join(home, "server.log"),
                        "-o", f"-h 127.0.0.1 -p {port} -k {home} -F", "-w", "-t", "60",
                        "start"], check=True, capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log = os.path.join(home, "server.log")
        text = open(log).read() if os.path.exists(log) else ""
        shutil.rmtree(home, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {exc}\n"
                           f"{getattr(exc, 'stderr', b'') or b''!r}\n{text}") from None
    try:
        yield f"postgresql://tensorlang@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", data, "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)
