#!/usr/bin/env bash
# Quick shell-level proof that a running local stack (infra/local/up) works:
#
#   1. the apiserver's /readyz answers ok
#   2. the server reports the pinned Kubernetes version
#   3. a Node annotated kwok.x-k8s.io/node=fake becomes Ready (kwok)
#   4. a Deployment's pods are bound to it (scheduler) and Running (kwok)
#   5. an eviction that would break a PDB answers 429; one that would not
#      succeeds and the ReplicaSet replaces the pod
#   6. the Karpenter CRDs accept the example manifests
#   7. moto answers DescribeVpcs with the seeded VPC
#   8. a DynamoDB conditional put conflict gives ConditionalCheckFailedException
#
# Everything it creates is removed at the end. Prints one line per check and
# "smoke: N passed, N failed"; exits non-zero when a check failed.
# SMOKE_VERBOSE=1 also prints the output of the checks that passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENV_FILE="$STATE_DIR/env"
[[ -f "$ENV_FILE" ]] || die "no $ENV_FILE: run infra/local/up first"
# shellcheck disable=SC1090
source "$ENV_FILE"

# Unique names, so a run never trips over what an earlier one still deletes.
RUN_ID="$(date +%s)-$$"
NS="carpool-smoke-$RUN_ID"
NODE="carpool-smoke-node-$RUN_ID"
PASSED=0
FAILED=0

k() { "$KUBECTL" "$@"; }

# check NAME COMMAND...: run one check, record and print its result. The
# check runs in a subshell with errexit on (it would be off inside an `if`),
# so any failing command in it fails the check.
check() {
  local name="$1" out rc
  shift
  out="$(mktemp)"
  set +e
  ( set -e; "$@" ) >"$out" 2>&1
  rc=$?
  set -e
  if (( rc == 0 )); then
    PASSED=$(( PASSED + 1 ))
    printf 'ok   %s\n' "$name"
    if [[ -n "${SMOKE_VERBOSE:-}" ]]; then
      sed 's/^/     /' "$out"
    fi
  else
    FAILED=$(( FAILED + 1 ))
    printf 'FAIL %s\n' "$name"
    tail -n 20 "$out" | sed 's/^/     /'
  fi
  rm -f "$out"
}

# retry SECONDS COMMAND...: run COMMAND every half second until it succeeds.
retry() {
  local deadline=$(( $(date +%s) + $1 ))
  shift
  until "$@"; do
    (( $(date +%s) < deadline )) || return 1
    sleep 0.5
  done
}

cleanup() {
  # Waits for the namespace to go (kwok deletes its pods), so the stack is
  # left as it was found.
  k delete namespace "$NS" --ignore-not-found --timeout=60s >/dev/null 2>&1 || true
  k delete node "$NODE" --ignore-not-found >/dev/null 2>&1 || true
  k delete -f "$REPO_ROOT/infra/crds/examples/" --ignore-not-found >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- checks ----------------------------------------------------------------------

check_readyz() {
  [[ "$(k get --raw /readyz)" == ok ]]
}

check_version() {
  local v
  v="$(k version -o json | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
  echo "server $v"
  [[ "$v" == "$K8S_VERSION" ]]
}

check_node_ready() {
  k apply -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: $NODE
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
    type: kwok
status:
  capacity:
    cpu: "2"
    memory: 8Gi
    pods: "110"
  allocatable:
    cpu: 1930m
    memory: 7Gi
    pods: "110"
EOF
  k wait --for=condition=Ready "node/$NODE" --timeout=60s
}

# pods_running_on_node: all 3 pods of the Deployment are Running on $NODE.
pods_running_on_node() {
  local lines
  lines="$(k get pods -n "$NS" -l app=smoke \
    -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.phase}{"\n"}{end}')"
  [[ "$(grep -c "^$NODE Running$" <<<"$lines")" == 3 && "$(wc -l <<<"$lines")" == 3 ]]
}

check_deployment_running() {
  k create namespace "$NS"
  retry 30 k get serviceaccount default -n "$NS"
  k apply -n "$NS" -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: smoke
spec:
  replicas: 3
  selector:
    matchLabels:
      app: smoke
  template:
    metadata:
      labels:
        app: smoke
    spec:
      terminationGracePeriodSeconds: 5
      nodeSelector:
        type: kwok
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          resources:
            requests:
              cpu: 100m
              memory: 64Mi
EOF
  k rollout status -n "$NS" deployment/smoke --timeout=90s
  retry 30 pods_running_on_node
  k get pods -n "$NS" -o wide
}

# evict POD: POST an Eviction for POD; prints the server's answer.
evict() {
  k create --raw "/api/v1/namespaces/$NS/pods/$1/eviction" -f - <<EOF
{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "$1", "namespace": "$NS"}}
EOF
}

pdb_allows() {
  [[ "$(k get pdb smoke -n "$NS" -o jsonpath='{.status.observedGeneration} {.status.currentHealthy} {.status.disruptionsAllowed}')" == "$1" ]]
}

check_pdb_blocks_eviction() {
  k apply -n "$NS" -f - <<EOF
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: smoke
spec:
  minAvailable: 3
  selector:
    matchLabels:
      app: smoke
EOF
  # The disruption controller fills in the status: 3 healthy, 0 allowed.
  retry 30 pdb_allows "1 3 0"
  local pod out
  pod="$(k get pods -n "$NS" -l app=smoke -o jsonpath='{.items[0].metadata.name}')"
  if out="$(evict "$pod" 2>&1)"; then
    echo "eviction of $pod was allowed: $out"
    return 1
  fi
  echo "$out"
  # kubectl reports HTTP 429 as TooManyRequests.
  grep -q 'TooManyRequests\|429' <<<"$out" && grep -qi 'disruption budget' <<<"$out"
}

check_eviction_allowed_and_replaced() {
  k patch pdb smoke -n "$NS" --type=merge -p '{"spec":{"minAvailable":2}}'
  retry 30 pdb_allows "2 3 1"
  local pod
  pod="$(k get pods -n "$NS" -l app=smoke -o jsonpath='{.items[0].metadata.name}')"
  evict "$pod"
  # kwok's pod-terminate stage removes the pod after its grace period; the ReplicaSet replaces it.
  retry 30 bash -c "! '$KUBECTL' get pod -n '$NS' '$pod' >/dev/null 2>&1"
  retry 60 pods_running_on_node
}

check_crd_examples() {
  k apply -f "$REPO_ROOT/infra/crds/examples/"
  k get nodepools.karpenter.sh default -o jsonpath='{.spec.template.spec.nodeClassRef.kind}' | grep -qx EC2NodeClass
  k get ec2nodeclasses.karpenter.k8s.aws default -o jsonpath='{.spec.amiSelectorTerms[0].ssmParameter}' \
    | grep -qx "$CARPOOL_AMI_SSM_PARAMETER"
}

check_moto_describe_vpcs() {
  "$CARPOOL_MOTO_PYTHON" - <<'PY'
import os
import boto3

ec2 = boto3.client("ec2")
vpcs = ec2.describe_vpcs(Filters=[{"Name": "tag:karpenter.sh/discovery",
                                   "Values": [os.environ["CARPOOL_CLUSTER"]]}])["Vpcs"]
assert [v["VpcId"] for v in vpcs] == [os.environ["CARPOOL_VPC_ID"]], vpcs
subnets = ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery",
                                         "Values": [os.environ["CARPOOL_CLUSTER"]]}])["Subnets"]
assert sorted(s["AvailabilityZone"] for s in subnets) == ["us-east-1a", "us-east-1b", "us-east-1c"], subnets
ami = boto3.client("ssm").get_parameter(Name=os.environ["CARPOOL_AMI_SSM_PARAMETER"])["Parameter"]["Value"]
assert ec2.describe_images(ImageIds=[ami])["Images"], ami
cluster = boto3.client("eks").describe_cluster(name=os.environ["CARPOOL_CLUSTER"])["cluster"]
print("vpc", vpcs[0]["VpcId"], "ami", ami, "eks", cluster["name"], cluster["status"])
PY
}

check_dynamodb_conditional_put() {
  "$CARPOOL_MOTO_PYTHON" - <<'PY'
import boto3
from botocore.exceptions import ClientError

ddb = boto3.client("dynamodb")
table = "carpool-smoke"
ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                 AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                 KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
try:
    item = {"pk": {"S": "lease"}, "owner": {"S": "a"}}
    ddb.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(pk)")
    try:
        ddb.put_item(TableName=table, Item={"pk": {"S": "lease"}, "owner": {"S": "b"}},
                     ConditionExpression="attribute_not_exists(pk)")
    except ClientError as e:
        code = e.response["Error"]["Code"]
        print("second put:", code)
        assert code == "ConditionalCheckFailedException", code
    else:
        raise AssertionError("second conditional put succeeded")
finally:
    ddb.delete_table(TableName=table)
PY
}

log "smoke: checking the stack in $STATE_DIR"
check "apiserver /readyz is ok" check_readyz
check "server version is $K8S_VERSION" check_version
check "kwok Node becomes Ready" check_node_ready
check "Deployment pods scheduled onto it and Running" check_deployment_running
check "PDB blocks an eviction with 429" check_pdb_blocks_eviction
check "allowed eviction succeeds and the pod is replaced" check_eviction_allowed_and_replaced
check "Karpenter CRDs accept the example manifests" check_crd_examples
check "moto DescribeVpcs finds the seeded VPC, subnets, AMI, EKS cluster" check_moto_describe_vpcs
check "DynamoDB conditional put conflict -> ConditionalCheckFailedException" check_dynamodb_conditional_put

echo "smoke: $PASSED passed, $FAILED failed"
(( FAILED == 0 ))
