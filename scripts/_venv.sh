# Sourced by scripts/serve and scripts/test: make sure ./.venv exists and holds this checkout
# with the requested extras, reinstalling only when pyproject.toml changed.
# pip runs with -qq: errors still print, but not the warnings of a machine's pip configuration.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PINLATER_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV (first run; takes a minute)" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -qq --upgrade pip
fi
STAMP="$VENV/.pinlater-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  "$VENV/bin/python" -m pip install -qq --editable "$ROOT${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
fi
