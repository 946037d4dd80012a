"""kill -9 of a running railstore during a PUT-heavy load, seen from boto3.

  s3_crash_check.py load   ENDPOINT ACCESS SECRET ACKS_FILE   # puts until the server dies
  s3_crash_check.py verify ENDPOINT ACCESS SECRET ACKS_FILE   # after the restart

Every acknowledged object must read back intact; any other object present must be intact too
(a put cut off by the kill leaves nothing or the whole object, never part of it).
"""
import hashlib
import sys
import threading

import boto3
from botocore.config import Config

mode, endpoint, access, secret, acks_path = sys.argv[1:6]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=access,
    aws_secret_access_key=secret,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                  connect_timeout=2, read_timeout=10),
)
bucket = "ci-crash"


def body(key):
    """The bytes of `key`: sizes from 0 B to about 1 MB, from the key alone."""
    seed = hashlib.sha256(key.encode()).digest()
    size = [0, 100, 4096, 5000, 70_000, 300_000, 1_000_000][seed[0] % 7]
    return (seed * (size // 32 + 1))[:size]


if mode == "load":
    s3.create_bucket(Bucket=bucket)
    lock = threading.Lock()
    acks = open(acks_path, "w")

    def writer(t):
        i = 0
        while True:
            key = f"w{t}/{i}"
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body(key))
            except Exception:
                return  # the server is gone
            with lock:
                acks.write(key + "\n")
                acks.flush()
            i += 1

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    acks.close()
else:
    acked = [k for k in open(acks_path).read().split("\n") if k]
    assert acked, "nothing was acknowledged before the kill"
    for key in acked:
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert got == body(key), f"acknowledged {key} is not intact"
    present = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        present += [o["Key"] for o in page.get("Contents", [])]
    for key in present:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body(key), key
    assert set(acked) <= set(present)
    print(f"crash: {len(acked)} acknowledged objects intact, {len(present) - len(acked)} "
          "unacknowledged ones intact")
