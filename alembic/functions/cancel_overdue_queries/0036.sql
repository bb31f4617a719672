-- kb.cancel_overdue_queries(max_runtime interval, member_of name DEFAULT 'kb_reader')
--   -> TABLE (pid integer, role name, runtime interval, query text, canceled boolean)
--
-- An administrator's watchdog for service roles: cancels (pg_cancel_backend) every active
-- statement of a member of member_of (kb_reader by default; superusers excepted, and never the
-- caller's own backend) that has been running for longer than max_runtime, and returns one row
-- per statement it tried to cancel (query cut to 200 characters; canceled is false when the
-- caller may not signal that backend). A role's statement_timeout is only a default the role can
-- SET to 0 (or change for itself with ALTER ROLE); this bound holds whatever the session set.
-- Run it from a scheduler as the database owner or a member of pg_signal_backend, e.g. every
-- 30 s with pg_cron. A NULL or non-positive max_runtime, or an unknown role, raise
-- PK001 (invalid argument). VOLATILE (it signals backends); EXECUTE for nobody but the owner.
CREATE OR REPLACE FUNCTION kb.cancel_overdue_queries(
    max_runtime interval,
    member_of name DEFAULT 'kb_reader')
RETURNS TABLE (
    pid integer,
    role name,
    runtime interval,
    query text,
    canceled boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_runtime IS NULL OR max_runtime <= interval '0' THEN
        RAISE EXCEPTION 'max_runtime must be a positive interval, got %',
            coalesce(max_runtime::text, 'NULL')
            USING ERRCODE = 'PK001', HINT = 'e.g. interval ''30 seconds''';
    END IF;
    IF member_of IS NULL OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = member_of) THEN
        RAISE EXCEPTION 'no role named %', coalesce(quote_ident(member_of), 'NULL')
            USING ERRCODE = 'PK001';
    END IF;
    RETURN QUERY
    SELECT a.pid, a.usename, pg_catalog.clock_timestamp() - a.query_start,
           left(a.query, 200), pg_catalog.pg_cancel_backend(a.pid)
      FROM pg_catalog.pg_stat_activity a
      JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
     WHERE a.state = 'active'
       AND a.backend_type = 'client backend'
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND NOT r.rolsuper
       AND pg_catalog.pg_has_role(a.usesysid, member_of, 'MEMBER')
       AND a.query_start < pg_catalog.clock_timestamp() - max_runtime
     ORDER BY a.pid;
END;
$$;

COMMENT ON FUNCTION kb.cancel_overdue_queries(interval, name) IS
'Watchdog: cancels statements of members of member_of (kb_reader) running longer than max_runtime; a bound a role cannot lift with SET.';

REVOKE ALL ON FUNCTION kb.cancel_overdue_queries(interval, name) FROM PUBLIC;
