#!/usr/bin/env bash
# The mobile-SSO scenario with two apps of one suite and the logout utility, against a private
# keyring and a local identity provider. Run by `make demo` (which installs and builds first).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MSSO_BIN:-$ROOT/.build/debug}
TIMEOUT=${DEMO_SESSION_TIMEOUT:-6}

# A throwaway user session: its own HOME, runtime dir, session bus and keyring.
WORK=$(mktemp -d /tmp/msso-demo.XXXXXX)
export HOME=$WORK/home XDG_RUNTIME_DIR=$WORK/run XDG_CONFIG_HOME=$WORK/home/.config
export XDG_DATA_HOME=$WORK/home/.local/share XDG_STATE_HOME=$WORK/home/.local/state
export MSSO_CONFIG=$WORK/config.toml MSSO_SYSTEM_DIR=$WORK/etc-msso   # stands in for /etc/msso
mkdir -p "$HOME" && mkdir -m 700 "$XDG_RUNTIME_DIR"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    "$ROOT/scripts/idp" stop "$WORK/idp" || true
    [ -n "${BUS_PID:-}" ] && kill "$BUS_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

step() { sleep 0.5; printf '\n\033[1m== %s\033[0m\n' "$*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

BUS=$(dbus-daemon --session --fork --print-address=1 --print-pid=1)
export DBUS_SESSION_BUS_ADDRESS=${BUS%%$'\n'*}
BUS_PID=${BUS##*$'\n'}
printf 'demo-login-password' | gnome-keyring-daemon --unlock --components=secrets >/dev/null

ISSUER=$("$ROOT/scripts/idp" start "$WORK/idp" "$(free_port)")
API_PORT=$(free_port)
python3 "$ROOT/examples/resource_server.py" "$API_PORT" "$ISSUER" & PIDS+=($!)
API=http://127.0.0.1:$API_PORT/inbox

cat > "$MSSO_CONFIG" <<TOML
[groups."com.example.suite"]
issuer = "$ISSUER"
client_id = "msso"
client_secret_file = "$WORK/idp/client_secret"
scopes = ["openid", "app1", "app2"]
resources = ["http://127.0.0.1:$API_PORT/"]   # the suite's API: nothing else gets its tokens
session_timeout = "${TIMEOUT}s"   # 30m in real life; short so the demo can show expiry
session_max = "1h"
TOML

# The admin registers the suite's apps for its access group (as configuration management would).
mkdir -p "$MSSO_SYSTEM_DIR/apps.d"
for app in App1 App2 Logout; do
    printf '[apps.%s]\nexecutable = "%s"\ngroups = ["com.example.suite"]\n\n' "$app" "$(realpath "$BIN/$app")"
done > "$MSSO_SYSTEM_DIR/apps.d/suite.toml"

"$BIN/mssod" 2>"${DEMO_MSSOD_LOG:-$WORK/mssod.log}" & PIDS+=($!)
for _ in $(seq 100); do [ -S "$XDG_RUNTIME_DIR/msso/broker.sock" ] && break; sleep 0.05; done
echo "Private keyring, identity provider at $ISSUER, suite API at $API, mssod running."

# Both apps follow the session live, as running apps do.
"$BIN/App1" watch & PIDS+=($!)
"$BIN/App2" watch & PIDS+=($!)

step "1. App1 starts, finds no credentials, and logs in (session window: ${TIMEOUT}s)"
echo alice-pass | "$BIN/App1" start --username alice --password-stdin

step "2. App2 starts, finds App1's login, and calls the API with a signed request"
"$BIN/App2" start
"$BIN/App2" fetch "$API"
echo "A program outside the suite asks the broker for the same token:"
"$BIN/msso" sign --url "$API" 2>&1 || true

step "3. App2 logs out and logs in again; App1 sees the new session"
"$BIN/App2" logout
echo alice-pass | "$BIN/App2" login --username alice --password-stdin
"$BIN/App1" fetch "$API"

step "4. Nobody extends; the window passes; App1 is told the session expired"
sleep "$((TIMEOUT + 1))"
"$BIN/App1" fetch "$API" || true

step "5. App1 logs in; the logout utility runs; App2 must authenticate again"
echo alice-pass | "$BIN/App1" start --username alice --password-stdin
"$BIN/Logout"
"$BIN/App2" fetch "$API" || true
"$BIN/msso" status

sleep 0.5
echo
echo "Demo finished: one login served both apps, one logout ended it for both, and the idle window expired it."
