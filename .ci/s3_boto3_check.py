"""boto3 against a running railstore: objects, ranges, listing, multipart, metadata, checksums.

Usage: s3_boto3_check.py ENDPOINT ACCESS_KEY SECRET_KEY
"""
import hashlib
import os
import sys

import boto3
import botocore.exceptions
from botocore.config import Config

endpoint, access, secret = sys.argv[1:4]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=access,
    aws_secret_access_key=secret,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}),
)

bucket = "ci-boto3"
s3.create_bucket(Bucket=bucket)
s3.create_bucket(Bucket=bucket)  # re-creating your own bucket succeeds

bodies = {f"obj/{n}": os.urandom(n) for n in (0, 1, 4096, 70_000, 3_000_000)}
for key, body in bodies.items():
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/x-test",
                  Metadata={"origin": "ci"})
for key, body in bodies.items():
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == body, key
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"origin": "ci"}
    assert got["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), key

# Ranges.
big = bodies["obj/3000000"]
r = s3.get_object(Bucket=bucket, Key="obj/3000000", Range="bytes=100-199")
assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
assert r["Body"].read() == big[100:200]
try:
    s3.get_object(Bucket=bucket, Key="obj/1", Range="bytes=5-9")
    raise SystemExit("an unsatisfiable range was served")
except botocore.exceptions.ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 416, e.response

# Listing with a delimiter and pagination; `a/b` beside `a/b/c`.
for key in ("a/b", "a/b/c", "a/bc", "a/d/e"):
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
page = s3.list_objects_v2(Bucket=bucket, Prefix="a/", Delimiter="/")
assert [o["Key"] for o in page.get("Contents", [])] == ["a/b", "a/bc"], page
assert [p["Prefix"] for p in page.get("CommonPrefixes", [])] == ["a/b/", "a/d/"], page
keys = []
for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2}):
    keys += [o["Key"] for o in p.get("Contents", [])]
assert keys == sorted(list(bodies) + ["a/b", "a/b/c", "a/bc", "a/d/e"]), keys

# Multipart with the default checksums, then a repeat of the completion.
mp = s3.create_multipart_upload(Bucket=bucket, Key="multi")
parts = [os.urandom(5 * 1024 * 1024), os.urandom(5 * 1024 * 1024), os.urandom(1234)]
done = []
for i, data in enumerate(parts, 1):
    r = s3.upload_part(Bucket=bucket, Key="multi", UploadId=mp["UploadId"], PartNumber=i, Body=data)
    done.append({"PartNumber": i, "ETag": r["ETag"]})
c1 = s3.complete_multipart_upload(Bucket=bucket, Key="multi", UploadId=mp["UploadId"],
                                  MultipartUpload={"Parts": done})
c2 = s3.complete_multipart_upload(Bucket=bucket, Key="multi", UploadId=mp["UploadId"],
                                  MultipartUpload={"Parts": done})
assert c1["ETag"] == c2["ETag"] and c1["ETag"].endswith('-3"'), (c1, c2)
assert s3.get_object(Bucket=bucket, Key="multi")["Body"].read() == b"".join(parts)

# An explicit checksum is verified and returned when asked.
s3.put_object(Bucket=bucket, Key="summed", Body=b"hello", ChecksumAlgorithm="SHA256")
h = s3.head_object(Bucket=bucket, Key="summed", ChecksumMode="ENABLED")
assert h.get("ChecksumSHA256"), h

# Clean up: batch delete, then the bucket.
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
s3.delete_bucket(Bucket=bucket)
print("boto3: ok")
