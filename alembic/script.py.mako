"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}

Schema changes go here by hand. SQL functions are not written here: after editing
sql_functions/, `python -m loader.devtools.snapshot -m "..."` adds their files to the function
store (alembic/functions/<name>/<revision>.sql) and writes a migration naming them; write the
schema changes into that migration instead of this one when a revision needs both.
"""

from alembic import op

revision = ${repr(up_revision).replace("'", '"')}
down_revision = ${repr(down_revision).replace("'", '"')}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
