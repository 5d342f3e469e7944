#!/usr/bin/env python3
"""Writes state-v1.db, state-v2.db and state-v3.db: deskboxd state databases as the releases that
used schema versions 1, 2 and 3 left them. Each database is made with the schema SQL of the
commit that introduced its version (read from git, not copied here), in the journal mode and
synchronous setting that store.cc used, with the rows that deskboxd of that time wrote: sandboxes
in every state, API keys (one revoked), tokens of each scope then known (one revoked, one
expired). Only columns the old schema has are written; the rest is left for the migration.

Run from anywhere inside the repository: python3 tests/api_unit/data/make_state_fixtures.py
The files are committed; StoreMigrationTest (tests/api_unit/store_test.cc) opens copies of them.
"""

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

# The commit that introduced each schema version (git log -G 'kSchemaVersion = ' -- api/src/store.cc).
VERSIONS = {
    1: "5f01118",  # api: deskboxd REST API on Beast
    2: "e6a894d",  # Live view: sandboxes.display
    3: "580331f",  # a refresh left unfinished is done again: sandboxes.browser_refreshing
    4: "b520625",  # recording: sandboxes.recording
}

T0 = 1764400000000  # 2025-11-29T07:06:40Z, in ms: every time below is relative to it


def old_schema(commit):
    src = subprocess.run(["git", "show", f"{commit}:api/src/store.cc"], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"constexpr int kSchemaVersion = (\d+);", src)
    if not m:  # later releases keep it in the header
        m = re.search(r"constexpr int kSchemaVersion = (\d+);", subprocess.run(
            ["git", "show", f"{commit}:api/include/api/store.h"], check=True, capture_output=True, text=True).stdout)
    version = int(m.group(1))
    sql = re.search(r'kSchema = R"sql\((.*?)\)sql"', src, re.S).group(1)
    return version, sql


def sha256(text):
    return hashlib.sha256(text.encode()).digest()


def sandbox(n, state, **kw):
    row = {
        "id": f"sb-{n:016x}", "state": state, "template": "desktop@d272c1217146c6cf", "slot": n,
        "qemu_pid": 4000 + n if state in ("running", "paused", "creating") else 0,
        "width": 1280, "height": 800, "timeout_s": 3600, "on_timeout": "pause",
        "expires_at_ms": T0 + n * 1000 + 3600000 if state == "running" else 0,
        "created_at_ms": T0 + n * 1000, "updated_at_ms": T0 + n * 1000 + 500,
        "stopped_at_ms": T0 + n * 1000 + 900 if state == "stopped" else 0,
        "metadata": '{"job":"fixture-%d"}' % n,
        "egress": '{"allow":["example.com"],"default":"deny","deny":[]}',
        "failure": "QEMU exited with status 1" if state == "failed" else "",
        "create_path": ["warm", "prestarted", "cold"][n % 3], "create_ms": 61.5 + n, "owner": "key_00000000000000a1",
        "display": "", "browser_refreshing": 0,  # written by v2 and v3 only
        "recording": 1,  # v4
    }
    row.update(kw)
    return row


SANDBOXES = [
    sandbox(1, "running"),
    sandbox(2, "paused", on_timeout="stop", egress="", recording=0),
    sandbox(3, "stopped", metadata="{}"),
    sandbox(4, "failed", width=1920, height=1080),
    sandbox(5, "running", display="1024x768", browser_refreshing=1),
]
KEYS = [
    {"id": "key_00000000000000a1", "name": "bootstrap", "hash": sha256("dbk_" + "a1" * 32),
     "created_at_ms": T0, "revoked_at_ms": 0},
    {"id": "key_00000000000000a2", "name": "ci", "hash": sha256("dbk_" + "a2" * 32),
     "created_at_ms": T0 + 10, "revoked_at_ms": T0 + 20},
]
TOKENS = [
    {"id": f"tok_00000000000000b{i}", "sandbox_id": "sb-0000000000000001", "scope": scope,
     "hash": sha256(f"dbt_{i:064x}"), "created_at_ms": T0 + 100 + i, "expires_at_ms": expires,
     "revoked_at_ms": revoked, "created_by": "key_00000000000000a1"}
    for i, (scope, expires, revoked) in enumerate(
        [("view", T0 + 3600000, 0), ("control", T0 + 3600000, T0 + 200), ("cdp", T0 + 1000, 0)], start=1)
]


def insert(db, table, rows):
    columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
    for row in rows:
        cols = [c for c in columns if c in row]
        missing = [c for c in columns if c not in row]
        assert not missing, f"{table}: no value for {missing}"
        db.execute(f"INSERT INTO {table} ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                   [row[c] for c in cols])


def make(version, commit, out):
    got, schema = old_schema(commit)
    assert got == version, f"{commit} has schema version {got}, not {version}"
    out.unlink(missing_ok=True)
    db = sqlite3.connect(out, isolation_level=None)
    for pragma in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"):
        db.execute(pragma)
    db.executescript(schema)
    db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    columns = {r[1] for r in db.execute("PRAGMA table_info(sandboxes)")}
    db.execute("BEGIN")
    insert(db, "sandboxes", [{k: v for k, v in s.items() if k in columns} for s in SANDBOXES])
    insert(db, "api_keys", KEYS)
    insert(db, "tokens", TOKENS)
    db.execute("COMMIT")
    db.close()  # the last connection checkpoints and removes the -wal: one self-contained file
    for suffix in ("-wal", "-shm"):
        assert not Path(str(out) + suffix).exists(), f"{out}{suffix} left behind"


def main():
    here = Path(__file__).resolve().parent
    os.chdir(here)
    only = {int(v) for v in sys.argv[1:]}  # versions to write (default all)
    for version, commit in VERSIONS.items():
        if only and version not in only:
            continue
        make(version, commit, here / f"state-v{version}.db")
        print(f"state-v{version}.db from {commit} (sqlite {sqlite3.sqlite_version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
