# Shared helpers for the infra/local scripts. Source it; do not run it.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are used by the sourcing scripts

# Directory of the infra/local scripts, wherever they are called from.
LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$LOCAL_DIR/../.." && pwd)"

# shellcheck source=versions.env
source "$LOCAL_DIR/versions.env"

# Where built binaries and the moto venv are cached (keyed by version), and
# where a running stack keeps its state (pids, ports, logs, PKI, kubeconfig).
CACHE_DIR="${CARPOOL_CACHE:-$HOME/.cache/carpool}"
STATE_DIR="${CARPOOL_STATE:-/tmp/carpool-stack}"

K8S_BIN="$CACHE_DIR/k8s-$K8S_VERSION/bin"
ETCD_BIN="$CACHE_DIR/etcd-$ETCD_VERSION/bin"
KWOK_BIN="$CACHE_DIR/kwok-$KWOK_VERSION/bin"
MOTO_VENV="$CACHE_DIR/moto-$MOTO_VERSION/venv"

# log MESSAGE...: a timestamped progress line on stderr.
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# die MESSAGE...: log and exit non-zero.
die() { log "ERROR: $*"; exit 1; }

# kubectl to use: the one built next to the control plane (the image's
# kubectl is too old for the version skew policy).
KUBECTL="$K8S_BIN/kubectl"

# Python used to create the moto venv (any python3 >= 3.9).
PYTHON="${PYTHON:-python3}"

# ensure_moto_venv: create the moto venv once; a marker file records that
# the pinned version was installed completely.
ensure_moto_venv() {
  local marker="$MOTO_VENV/.carpool-installed"
  if [[ -f "$marker" ]]; then
    return 0
  fi
  log "installing moto[server]==$MOTO_VERSION into $MOTO_VENV"
  rm -rf "$MOTO_VENV"
  mkdir -p "$(dirname "$MOTO_VENV")"
  "$PYTHON" -m venv "$MOTO_VENV"
  "$MOTO_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "moto[server]==$MOTO_VERSION"
  touch "$marker"
  log "moto $MOTO_VERSION installed"
}
