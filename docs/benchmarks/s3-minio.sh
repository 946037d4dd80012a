#!/bin/bash
# railstore against MinIO through S3, same generator, same machine, one sitting (issue 14 part
# 5): `railstore bench s3 --endpoint` drives a release `railstore serve` on its embedded default
# (6 file devices, RS(3,3) under the hybrid policy for objects over 4 KiB, separation on) and
# MinIO on 6 drive folders (its default parity on 6 drives is EC:3, RS(3,3)), both on the same
# disk, alternating target by target, round by round. The store's own in-process rate for the
# same objects (`bench s3` without `--endpoint`) comes last, for the 4 KiB GET goal.
# Usage: s3-minio.sh RAILSTORE MINIO OUT-DIR [SECONDS] [ROUNDS]
# MinIO: `go install github.com/minio/minio@latest` (Go module proxy).
set -u
BIN=$1; MINIO=$2; OUT=$3; T=${4:-10}; ROUNDS=${5:-2}
mkdir -p "$OUT"
D=$(mktemp -d -p "${BENCH_DIR:-/work}")
trap 'kill $RS $MN 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
ACCESS=benchaccess; SECRET=benchsecret12345
# RAILSTORE_CONFIG: a configuration file for the server (the embedded default without it).
RAILSTORE_ACCESS_KEY=$ACCESS RAILSTORE_SECRET_KEY=$SECRET $BIN serve --data "$D/railstore" \
    ${RAILSTORE_CONFIG:+--config "$RAILSTORE_CONFIG"} \
    --listen 127.0.0.1:19100 --nbd-listen 127.0.0.1:19810 > "$D/railstore.log" 2>&1 &
RS=$!
MINIO_ROOT_USER=$ACCESS MINIO_ROOT_PASSWORD=$SECRET MINIO_CI_CD=1 \
    $MINIO server --quiet --address 127.0.0.1:19200 "$D/minio/d{1...6}" > "$D/minio.log" 2>&1 &
MN=$!
# Up once they answer HTTP at all (an anonymous request gets 403).
for port in 19100 19200; do
    for _ in $(seq 60); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" != 000 ] && break
        sleep 1
    done
done
# run TARGET PORT SIZE OBJECTS ROUND
run() {
    $BIN bench s3 --endpoint "http://127.0.0.1:$2" --access-key $ACCESS --secret-key $SECRET \
        --bucket "bench-$(echo $3 | tr A-Z a-z)-$5" --size "$3" --objects "$4" --clients 16 --workload put,get \
        --duration "${T}s" --warmup 1s --no-baseline --quiet --json "$OUT/$1-$3-$5.json" \
        > "$D/bench.log" 2>&1 || { echo "$1 $3 round $5 failed:"; grep -m3 -i error "$D/bench.log"; }
}
for round in $(seq "$ROUNDS"); do
    for spec in "1MiB 500" "4KiB 2000"; do
        set -- $spec
        run railstore 19100 "$1" "$2" "$round"
        run minio 19200 "$1" "$2" "$round"
    done
done
kill $RS $MN; wait 2>/dev/null
# The store's own rate for 4 KiB objects, in process, beside its S3 rate.
$BIN bench s3 --path "$D/baseline" --size 4KiB --objects 2000 --clients 16 --workload put,get \
    --duration "${T}s" --quiet --json "$OUT/baseline-4KiB.json" > "$D/bench.log" 2>&1 \
    || { echo "baseline failed:"; tail -5 "$D/bench.log"; }
echo "JSON in $OUT"
