"""A real S3-compatible server on loopback for the tests: moto in server mode, with
signature checking on (IAM: every request after the set-up must be signed by a user's
key, and is allowed or denied by that user's policy).

Run by the tests with the Python of a virtual environment holding moto
(tests/s3/setup.sh makes it; $FERRY_S3_PYTHON names its interpreter):

    $FERRY_S3_PYTHON tests/s3/s3_server.py --upload TREE:BUCKET/PREFIX [--deny KEY ...]

prints one JSON line {"endpoint", "access_key", "secret_key", "log"} once the bucket is
filled, then serves until killed. `log` is the file of the server's request lines (one
per request), for tests that check no request was sent.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time


def free_port(host):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upload", action="append", default=[], help="TREE:BUCKET/PREFIX: a folder's files as keys")
    ap.add_argument("--deny", action="append", default=[], help="BUCKET/KEY the test user may not read")
    ap.add_argument("--log", required=True)
    ap.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    ap.add_argument("--no-auth", action="store_true",
                    help="no signature checks (benchmarks: the server's own CPU per request is lower)")
    a = ap.parse_args()
    import boto3

    port = free_port(a.host)
    # The first three requests (the user, its key, its policy) go unsigned; every later
    # one must carry a valid SigV4 signature of an existing key.
    env = dict(os.environ) if a.no_auth else dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3")
    log = open(a.log, "w")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", a.host, "-p", str(port)], env=env,
                              stdout=log, stderr=log)
    endpoint = "http://%s:%d" % (a.host, port)
    for _ in range(300):
        try:
            socket.create_connection((a.host, port), 0.2).close()
            break
        except OSError:
            if server.poll() is not None:
                raise SystemExit("moto exited: see %s" % a.log)
            time.sleep(0.1)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    iam.create_user(UserName="ferry")
    key = iam.create_access_key(UserName="ferry")["AccessKey"]
    statements = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
    for d in a.deny:
        statements.append({"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::" + d})
    iam.put_user_policy(UserName="ferry", PolicyName="ferry-tests",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key["AccessKeyId"],
                      aws_secret_access_key=key["SecretAccessKey"])
    made = set()
    for spec in a.upload:
        tree, dest = spec.rsplit(":", 1)
        bucket, _, prefix = dest.partition("/")
        if bucket not in made:
            s3.create_bucket(Bucket=bucket)
            made.add(bucket)
        for d, _, files in os.walk(tree):
            for f in files:
                path = os.path.join(d, f)
                rel = os.path.relpath(path, tree).replace(os.sep, "/")
                s3.upload_file(path, bucket, (prefix.rstrip("/") + "/" if prefix else "") + rel)
    print(json.dumps({"endpoint": endpoint, "access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"],
                      "log": a.log}), flush=True)
    try:
        server.wait()
    finally:
        server.kill()


if __name__ == "__main__":
    main()
