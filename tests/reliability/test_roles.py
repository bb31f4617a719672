"""The statement timeout a service role is given is advisory (second review): the role can
``SET statement_timeout = 0`` or change its own per-database default. These tests measure, on
the test server (PostgreSQL 18), what a reader can undo and what holds:

- undone by the reader: the ``statement_timeout`` set by ``pgkb db grant`` (session ``SET``,
  and ``ALTER ROLE ... IN DATABASE ... SET`` on itself), and one set by a login event trigger
  (PostgreSQL 17+); ``transaction_timeout`` (PostgreSQL 17+) is an ordinary setting too;
- holds: the clamps inside the kb functions (bounded work per call, whatever the arguments), and
  an administrator's watchdog, ``kb.cancel_overdue_queries``, which cancels kb_reader members'
  statements running longer than a limit (the reader can neither call it nor stop it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.ops.test_roles import _login, kb, login_role, run  # noqa: F401 (fixtures)


def test_the_role_timeouts_are_advisory(
    kb: dict[str, str],  # noqa: F811
    db_url: str,
    login_role: str,  # noqa: F811
) -> None:
    result = run(["db", "grant", login_role, "--read", "--statement-timeout", "1s"], kb)
    assert result.exit_code == 0, result.output
    with _login(db_url, login_role) as reader:
        assert reader.execute("SHOW statement_timeout").fetchone() == ("1s",)
        # a session SET undoes both ...
        reader.execute("SET statement_timeout = 0")
        reader.execute("SET transaction_timeout = 0")
        reader.execute("SELECT pg_sleep(1.5)")
        # ... and so does ALTER ROLE on itself, for every later login
        database = reader.execute("SELECT current_database()").fetchone()[0]
        reader.execute(
            sql.SQL("ALTER ROLE {} IN DATABASE {} SET statement_timeout = 0").format(
                sql.Identifier(login_role), sql.Identifier(database)
            )
        )
    with _login(db_url, login_role) as reader:
        assert reader.execute("SHOW statement_timeout").fetchone() == ("0",)
    # a login event trigger (PostgreSQL 17+) sets the timeout at every login: SET undoes it too
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(
            "CREATE FUNCTION public.pin_timeout() RETURNS event_trigger LANGUAGE plpgsql AS"
            " $$BEGIN PERFORM set_config('statement_timeout', '1s', false); END$$"
        )
        admin.execute(
            "CREATE EVENT TRIGGER pin_timeout ON login EXECUTE FUNCTION public.pin_timeout()"
        )
    try:
        with _login(db_url, login_role) as reader:
            assert reader.execute("SHOW statement_timeout").fetchone() == ("1s",)
            reader.execute("SET statement_timeout = 0")
            reader.execute("SELECT pg_sleep(1.5)")
    finally:
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("DROP EVENT TRIGGER pin_timeout")


def _wait_for(predicate: Any, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_watchdog_cancels_a_reader_that_lifted_its_timeout(
    kb: dict[str, str],  # noqa: F811
    db_url: str,
    login_role: str,  # noqa: F811
) -> None:
    result = run(["db", "grant", login_role, "--read", "--statement-timeout", "1s"], kb)
    assert result.exit_code == 0, result.output
    outcome: dict[str, Any] = {}
    with _login(db_url, login_role) as reader:
        reader.execute("SET statement_timeout = 0")
        reader.execute("SET transaction_timeout = 0")
        # the reader cannot call the watchdog on others, nor on itself
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("SELECT * FROM kb.cancel_overdue_queries('1 second')")
        pid = reader.info.backend_pid

        def long_query() -> None:
            try:
                reader.execute("SELECT pg_sleep(600)")
                outcome["finished"] = True
            except psycopg.errors.QueryCanceled as exc:
                outcome["canceled"] = str(exc)

        thread = threading.Thread(target=long_query, daemon=True)
        thread.start()
        with psycopg.connect(db_url, autocommit=True) as admin:

            def running_over_a_second() -> bool:
                row = admin.execute(
                    "SELECT now() - query_start > interval '1 second' FROM pg_stat_activity"
                    " WHERE pid = %s AND state = 'active' AND query LIKE '%%pg_sleep(600)%%'",
                    (pid,),
                ).fetchone()
                return bool(row and row[0])

            _wait_for(running_over_a_second, "the reader's query to run for 1 s")
            # a limit above its runtime leaves it alone; the admin's own statements are spared
            assert (
                admin.execute("SELECT * FROM kb.cancel_overdue_queries('1 hour')").fetchall() == []
            )
            rows = admin.execute(
                "SELECT pid, role, canceled FROM kb.cancel_overdue_queries('1 second')"
            ).fetchall()
            assert rows == [(pid, login_role, True)]
        thread.join(60)
    assert "canceling statement due to user request" in outcome.get("canceled", ""), outcome
