#!/usr/bin/env bash
# Regenerate the Go tools modules that the local stack is built from:
#
#   infra/local/k8s/   requires k8s.io/kubernetes@$K8S_VERSION and pins each of
#                      its staging modules (k8s.io/api, k8s.io/client-go, ...,
#                      which upstream points at ./staging with v0.0.0) with a
#                      `replace k8s.io/<name> => k8s.io/<name> v0.<minor>.<patch>`
#                      line. The binaries are recorded as `tool` directives.
#   infra/local/etcd/  requires go.etcd.io/etcd/server/v3@$ETCD_VERSION; its
#                      main.go calls etcdmain.Main like etcd's own main does.
#
# Run it after changing K8S_VERSION or ETCD_VERSION in versions.env, then
# commit go.mod and go.sum of both modules. `build` never runs it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Binaries of k8s.io/kubernetes that `build` compiles.
K8S_TOOLS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

# --- k8s.io/kubernetes -------------------------------------------------------
gen_k8s() {
  local dir="$LOCAL_DIR/k8s"
  # v1.35.4 -> v0.35.4: the tag scheme of the staging modules.
  local staging_version="v0.${K8S_VERSION#v1.}"
  log "k8s: locating the go.mod of k8s.io/kubernetes@$K8S_VERSION"
  local upstream_mod
  # Run outside any module, so the (possibly stale) go.mod here plays no part.
  upstream_mod="$(cd / && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
  [[ -f "$upstream_mod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION"

  cd "$dir"
  rm -f go.mod go.sum
  go mod init carpool.local/infra/local/k8s
  # Same language version and GODEBUG defaults as upstream.
  go mod edit -go="$(awk '$1 == "go" { print $2; exit }' "$upstream_mod")"
  local godebug
  while read -r godebug; do
    go mod edit -godebug="$godebug"
  done < <(awk '$1 == "godebug" && $2 != "(" { print $2 }' "$upstream_mod")

  # Every `k8s.io/<name> v0.0.0` requirement is a staging module.
  local names=() name
  mapfile -t names < <(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$upstream_mod" | sort -u)
  [[ ${#names[@]} -gt 0 ]] || die "no staging modules found in $upstream_mod"
  log "k8s: pinning ${#names[@]} staging modules to $staging_version"
  for name in "${names[@]}"; do
    go mod edit -replace="$name=$name@$staging_version"
  done

  log "k8s: go get k8s.io/kubernetes@$K8S_VERSION and the tools"
  go get "k8s.io/kubernetes@$K8S_VERSION"
  local tool
  for tool in "${K8S_TOOLS[@]}"; do
    go get -tool "k8s.io/kubernetes/cmd/$tool@$K8S_VERSION"
  done
  go mod tidy
  log "k8s: wrote $dir/go.mod"
}

# --- etcd ----------------------------------------------------------------------
gen_etcd() {
  local dir="$LOCAL_DIR/etcd"
  cd "$dir"
  [[ -f main.go ]] || die "$dir/main.go is missing"
  rm -f go.mod go.sum
  go mod init carpool.local/infra/local/etcd
  # Same language version as etcd's server module (go mod init would write
  # the local toolchain's, which other machines may not have).
  local server_mod
  server_mod="$(go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
  [[ -f "$server_mod" ]] || die "could not download go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go mod edit -go="$(awk '$1 == "go" { print $2; exit }' "$server_mod")"
  log "etcd: go get go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go mod tidy
  log "etcd: wrote $dir/go.mod"
}

case "${1:-all}" in
  k8s) gen_k8s ;;
  etcd) gen_etcd ;;
  all) (gen_k8s); (gen_etcd) ;;
  *) die "usage: $0 [k8s|etcd|all]" ;;
esac
