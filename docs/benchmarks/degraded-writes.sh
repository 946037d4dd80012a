#!/bin/bash
# Degraded PUT latency: the embedded default, 2 clients, 4 KiB PUTs, healthy then with device 4 failed.
# Usage: degraded-writes.sh PATH-TO-RAILSTORE PORT
BIN=$1; PORT=$2
D=$(mktemp -d); printf '[devices]\ncapacity_bytes = 1073741824\ndirect_io = false\n' > $D/c.toml
RAILSTORE_ACCESS_KEY=k1234 RAILSTORE_SECRET_KEY=secret-secret-1234 $BIN serve --config $D/c.toml --data $D/data --listen 127.0.0.1:$PORT > $D/serve.log 2>&1 &
PID=$!; sleep 3
B="$BIN bench s3 --endpoint http://127.0.0.1:$PORT --access-key k1234 --secret-key secret-secret-1234 --workload put --size 4KiB --clients 2 --duration 12s --objects 50 --warmup 0s --quiet --no-plots"
echo "healthy:"; for i in 1; do $B 2>&1 | grep "^s3 "; done
curl -s -X POST -H "Authorization: Bearer $(cat $D/data/admin-token)" "http://127.0.0.1:$PORT/admin/v1/devices/4/fail?reason=bench" > /dev/null
echo "device 4 failed:"; for i in 1; do $B 2>&1 | grep "^s3 "; done
kill $PID; wait $PID; rm -rf $D
