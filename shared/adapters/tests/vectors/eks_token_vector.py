#!/usr/bin/env python3
"""Prints the reference EKS token for the known-vector test in src/eks_token.rs.

It signs as aws-cli's `eks get-token` does (botocore's RequestSigner, STS GetCallerIdentity,
the x-k8s-aws-id header, 60 s expiry), with the clock fixed at 2026-11-30T12:00:00Z.
Needs botocore (`pip install botocore`).
"""
import base64
import datetime
from unittest import mock

import botocore.session
from botocore.credentials import Credentials
from botocore.model import ServiceId
from botocore.signers import RequestSigner

session = botocore.session.get_session()
creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
signer = RequestSigner(ServiceId("sts"), "us-east-1", "sts", "v4", creds, session.get_component("event_emitter"))
params = {
    "method": "GET",
    "url": "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
    "body": {},
    "headers": {"x-k8s-aws-id": "my-cluster"},
    "context": {},
}
with mock.patch("botocore.auth.get_current_datetime", return_value=datetime.datetime(2026, 11, 30, 12, 0, 0)):
    url = signer.generate_presigned_url(params, region_name="us-east-1", expires_in=60, operation_name="")
print(url)
print("k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("="))
