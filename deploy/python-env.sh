#!/usr/bin/env bash
# Creates the project-local Python virtual environment (.venv/ at the repository root, ignored by
# git) with the pinned packages of deploy/python-requirements.txt, from PyPI: the `openai` client
# that tests/e2e/openai_api_test.py drives the router's HTTP API with, and jinja2 for the
# chat-template oracle (tests/model/chat_template/). Nothing is installed system-wide.
# deploy/test.sh runs it before the tests.
#
#   deploy/python-env.sh     prints the environment's python (last line)
#
# Idempotent: an environment made from the same requirements file is reused as is.
# Environment: TANDEM_VENV overrides the environment's directory.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TANDEM_VENV:-$repo/.venv}
requirements=$repo/deploy/python-requirements.txt
stamp=$venv/.tandem-requirements  # the requirements the environment was made from

if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then
  echo "$venv/bin/python"
  exit 0
fi
echo "python-env.sh: creating $venv with $(grep -v '^#' "$requirements" | xargs)" >&2
python3 -m venv "$venv" || {
  echo "python-env.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 1
}
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
echo "$venv/bin/python"
