# Sourced by scripts/serve and scripts/test: make sure ./.venv exists and holds this checkout
# with the requested extras, reinstalling when pyproject.toml (its dependencies and their pins)
# or the checkout the venv serves changed since the last install: the stamp holds a hash of both,
# so an edit, a pull or a branch switch that changes a pin reinstalls, whatever the file times.
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
WANT="$("$VENV/bin/python" -c 'import hashlib, sys
print(hashlib.sha256(open(sys.argv[1], "rb").read() + sys.argv[2].encode()).hexdigest())' \
  "$ROOT/pyproject.toml" "$ROOT")"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -qq --editable "$ROOT${EXTRAS:+[$EXTRAS]}"
  echo "$WANT" >"$STAMP"
fi
