#!/usr/bin/env bash
# Runs once, on the first start of an empty Postgres volume (docker-entrypoint-initdb.d): one role
# and one database per service, each with its own password from the environment. Passwords are
# passed as psql variables (:'name' quotes them), never pasted into SQL text.
set -euo pipefail

create_db() {
  local name="$1" password="$2"
  if [[ -z "${password}" ]]; then
    echo "init-databases: no password given for role ${name}" >&2
    exit 1
  fi
  psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER}" --dbname postgres \
       -v role="${name}" -v pw="${password}" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'pw';
CREATE DATABASE :"role" OWNER :"role";
REVOKE ALL ON DATABASE :"role" FROM PUBLIC;
SQL
}

create_db mlflow "${MLFLOW_DB_PASSWORD:-}"
create_db prefect "${PREFECT_DB_PASSWORD:-}"
create_db labelstudio "${LABEL_STUDIO_DB_PASSWORD:-}"
