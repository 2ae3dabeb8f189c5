#!/usr/bin/env python3
"""EKS-style bearer-token authentication for the local apiserver: a token webhook.

kube-apiserver (started by infra/local/up with --authentication-token-webhook-config-file)
POSTs a TokenReview for every bearer token it does not know itself. This server answers it
the way aws-iam-authenticator answers it on EKS, for tokens made like `aws eks get-token`
makes them: `k8s-aws-v1.` + base64url(a presigned STS GetCallerIdentity URL whose
signature also covers the `x-k8s-aws-id: <cluster>` header).

For a token it:
  1. decodes the URL and checks its shape: https, host `sts[.<region>].amazonaws.com`,
     path `/`, only the query parameters such a URL has, `Action=GetCallerIdentity`,
     `X-Amz-SignedHeaders` exactly `host;x-k8s-aws-id`, `X-Amz-Expires` at most 60, and an
     `X-Amz-Date` no older than 15 minutes (EKS's window) and not in the future;
  2. checks the SigV4 signature itself, for each EKS cluster moto knows in the token's
     region, with the secret of the stack's access key. On AWS, STS checks the signature
     and the authenticator supplies its cluster id as the header value; moto checks no
     signatures, so this is the only place a token for another cluster, or a tampered
     one, can be refused. The cluster whose name makes the signature valid is the
     cluster the token was made for;
  3. calls GetCallerIdentity on moto with the token's query string (the host rewritten to
     moto's endpoint) to learn the caller's ARN;
  4. maps the ARN through the mapping file (aws-auth's mapRoles and mapUsers, as JSON; an
     assumed-role ARN is matched as its role ARN, as the authenticator does).

Anything else gets `authenticated: false`, with the reason in this server's log (never the
token). `GET /healthz` answers `ok`.

Standard library only. Usage:
  token-webhook.py --port PORT --moto URL --mapping FILE
with the stack's credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
"""

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_HEADER = "x-k8s-aws-id"
MAX_EXPIRES = 60  # seconds, as `aws eks get-token` signs them
MAX_AGE = datetime.timedelta(minutes=15)  # EKS accepts a token this long after signing
FUTURE_SKEW = datetime.timedelta(minutes=5)
STS_HOST = re.compile(r"^sts(\.[a-z0-9-]+)?\.amazonaws\.com$")
PARAMS = {
    "Action",
    "Version",
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
}
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class Reject(Exception):
    """The token is not accepted; the message says why (for the log only)."""


def log(message):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    print(f"[{now}] {message}", file=sys.stderr, flush=True)


def presigned_url(token):
    if not token.startswith(TOKEN_PREFIX):
        raise Reject("not a k8s-aws-v1 token")
    body = token[len(TOKEN_PREFIX) :]
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except ValueError as e:
        raise Reject(f"token is not base64url: {e}") from None


def check_url(url, now):
    """The query parameters of a well-formed, fresh GetCallerIdentity presigned URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not STS_HOST.match(parts.netloc) or parts.path not in ("", "/"):
        raise Reject(f"not an STS URL: {parts.scheme}://{parts.netloc}{parts.path}")
    try:
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise Reject("malformed query string") from None
    params = {}
    for key, value in pairs:
        if key not in PARAMS:
            raise Reject(f"unexpected query parameter {key}")
        if key in params:
            raise Reject(f"query parameter {key} given twice")
        params[key] = value
    if params.get("Action") != "GetCallerIdentity":
        raise Reject(f"action is {params.get('Action')!r}, not GetCallerIdentity")
    if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise Reject("not signed with AWS4-HMAC-SHA256")
    if params.get("X-Amz-SignedHeaders") != f"host;{CLUSTER_HEADER}":
        raise Reject(f"signed headers are {params.get('X-Amz-SignedHeaders')!r}, not host;{CLUSTER_HEADER}")
    try:
        expires = int(params.get("X-Amz-Expires", ""))
    except ValueError:
        raise Reject("X-Amz-Expires is not a number") from None
    if not 0 < expires <= MAX_EXPIRES:
        raise Reject(f"X-Amz-Expires is {expires}, more than {MAX_EXPIRES}")
    try:
        signed_at = datetime.datetime.strptime(params.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc
        )
    except ValueError:
        raise Reject("X-Amz-Date is missing or malformed") from None
    if now - signed_at > MAX_AGE:
        raise Reject(f"token signed at {signed_at:%H:%M:%S}, more than 15 minutes ago")
    if signed_at - now > FUTURE_SKEW:
        raise Reject(f"token signed at {signed_at:%H:%M:%S}, in the future")
    scope = params.get("X-Amz-Credential", "").split("/")
    if len(scope) != 5 or scope[3] != "sts" or scope[4] != "aws4_request" or scope[1] != params["X-Amz-Date"][:8]:
        raise Reject("malformed X-Amz-Credential")
    if "X-Amz-Signature" not in params:
        raise Reject("no signature")
    return parts.netloc, params


def quote(s):
    return urllib.parse.quote(s, safe="-_.~")


def signature(host, params, cluster, secret):
    """The SigV4 query signature of the URL with `x-k8s-aws-id: cluster`."""
    query = "&".join(
        f"{quote(k)}={quote(v)}" for k, v in sorted(params.items()) if k != "X-Amz-Signature"
    )
    canonical = "\n".join(
        ["GET", "/", query, f"host:{host}", f"{CLUSTER_HEADER}:{cluster}", "", params["X-Amz-SignedHeaders"], EMPTY_SHA256]
    )
    _, day, region, service, terminal = params["X-Amz-Credential"].split("/")
    scope = f"{day}/{region}/{service}/{terminal}"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", params["X-Amz-Date"], scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{secret}".encode()
    for part in (day, region, service, terminal):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


class Authenticator:
    def __init__(self, moto, mapping_file, secrets):
        self.moto = moto.rstrip("/")
        self.mapping_file = mapping_file
        self.secrets = secrets

    def moto_get(self, path, service, params, extra_headers=None):
        """A GET to moto. moto routes an unsigned GET by the credential scope of its
        Authorization header (it checks no signature), so one is made from the token's."""
        akid, day, region = params["X-Amz-Credential"].split("/")[:3]
        headers = {
            "Authorization": f"AWS4-HMAC-SHA256 Credential={akid}/{day}/{region}/{service}/aws4_request, "
            f"SignedHeaders=host, Signature={'0' * 64}",
            **(extra_headers or {}),
        }
        request = urllib.request.Request(self.moto + path, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def clusters(self, params):
        """The EKS clusters moto knows in the token's region."""
        return json.loads(self.moto_get("/clusters", "eks", params)).get("clusters", [])

    def cluster_of(self, host, params):
        akid = params["X-Amz-Credential"].split("/")[0]
        secret = self.secrets.get(akid)
        if secret is None:
            raise Reject(f"unknown access key {akid}")
        given = params["X-Amz-Signature"]
        for cluster in self.clusters(params):
            if hmac.compare_digest(signature(host, params, cluster, secret), given):
                return cluster
        raise Reject("the signature is valid for no EKS cluster in moto (wrong x-k8s-aws-id, or tampered)")

    def caller(self, params, cluster):
        """GetCallerIdentity on moto: (arn, account, user id)."""
        query = urllib.parse.urlencode(params)
        body = self.moto_get("/?" + query, "sts", params, {CLUSTER_HEADER: cluster})
        ns = {"sts": "https://sts.amazonaws.com/doc/2011-06-15/"}
        result = ET.fromstring(body).find("sts:GetCallerIdentityResult", ns)
        if result is None:
            raise Reject("GetCallerIdentity gave no result")
        return tuple(result.findtext(f"sts:{f}", "", ns) for f in ("Arn", "Account", "UserId"))

    def user(self, arn, account, user_id, cluster):
        with open(self.mapping_file, encoding="utf-8") as f:
            mapping = json.load(f)
        # arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION is matched as arn:aws:iam::ACCOUNT:role/ROLE.
        m = re.match(r"^arn:([^:]+):sts::(\d+):assumed-role/([^/]+)/(.+)$", arn)
        session = ""
        entries = mapping.get("mapUsers", [])
        key, canonical = "userarn", arn
        if m:
            partition, acct, role, session = m.groups()
            entries = mapping.get("mapRoles", [])
            key, canonical = "rolearn", f"arn:{partition}:iam::{acct}:role/{role}"
        for entry in entries:
            if entry.get(key) == canonical:
                username = entry["username"].replace("{{AccountID}}", account).replace("{{SessionName}}", session)
                return {
                    "username": username,
                    "uid": f"aws-iam-authenticator:{account}:{user_id}",
                    "groups": list(entry.get("groups", [])),
                    "extra": {
                        "arn": [arn],
                        "canonicalArn": [canonical],
                        "accountId": [account],
                        "sessionName": [session],
                        "clusterId": [cluster],
                    },
                }
        raise Reject(f"{canonical} is not in the mapping")

    def review(self, token):
        now = datetime.datetime.now(datetime.timezone.utc)
        host, params = check_url(presigned_url(token), now)
        cluster = self.cluster_of(host, params)
        arn, account, user_id = self.caller(params, cluster)
        return self.user(arn, account, user_id, cluster)


def handler(auth):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status, body, content_type="application/json"):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/healthz":
                self.reply(200, "ok", "text/plain")
            else:
                self.reply(404, "not found", "text/plain")

        def do_POST(self):
            try:
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                token = review["spec"]["token"]
            except (ValueError, KeyError, TypeError):
                self.reply(400, json.dumps({"error": "not a TokenReview"}))
                return
            status = {"authenticated": False}
            try:
                user = auth.review(token)
                status = {"authenticated": True, "user": user}
                log(f"authenticated {user['extra']['arn'][0]} as {user['username']} {user['groups']}")
            except Reject as e:
                log(f"rejected: {e}")
            except (OSError, ValueError, ET.ParseError) as e:
                # moto unreachable or an unexpected answer: refuse, and say so.
                log(f"rejected: error while checking the token: {e!r}")
                status["error"] = "the authenticator could not check the token"
            answer = {
                "apiVersion": review.get("apiVersion", "authentication.k8s.io/v1"),
                "kind": "TokenReview",
                "status": status,
            }
            self.reply(200, json.dumps(answer))

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass  # one line per review is logged above, never a request line

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--moto", required=True, help="moto's endpoint, e.g. http://127.0.0.1:25000")
    parser.add_argument("--mapping", required=True, help="JSON file with mapRoles and mapUsers")
    args = parser.parse_args()
    secrets = {os.environ["AWS_ACCESS_KEY_ID"]: os.environ["AWS_SECRET_ACCESS_KEY"]}
    auth = Authenticator(args.moto, args.mapping, secrets)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(auth))
    log(f"token webhook on http://127.0.0.1:{args.port}, moto {args.moto}, mapping {args.mapping}")
    server.serve_forever()


if __name__ == "__main__":
    main()
