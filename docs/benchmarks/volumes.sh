#!/bin/bash
# Volumes over NBD, first figures (issue 17 parts 1-2): fio's nbd engine against a release
# `railstore serve` on the embedded default (6 file devices, RS(3,3) with separation, journal
# durability), one volume per mechanism and object size; device bytes from /metrics.
# Usage: volumes.sh PATH-TO-RAILSTORE [SECONDS]
set -u
BIN=$1; T=${2:-15}
D=$(mktemp -d); printf '[devices]\ncapacity_bytes = 4294967296\ndirect_io = false\n' > $D/c.toml
RAILSTORE_ACCESS_KEY=k1234 RAILSTORE_SECRET_KEY=secret-secret-1234 $BIN serve --config $D/c.toml \
    --data $D/data --listen 127.0.0.1:19000 --nbd-listen 127.0.0.1:19809 > $D/serve.log 2>&1 &
PID=$!; sleep 3
TOKEN=$(cat $D/data/admin-token)
V() { $BIN volume "$@" --server 127.0.0.1:19000 --admin-token $TOKEN > /dev/null; }
# Sum of a counter over its labels.
M() { curl -s http://127.0.0.1:19000/metrics | awk -v n="railstore_$1" '$1 ~ "^"n"({|$)" {s+=$2} END {printf "%.0f", s}'; }
# run NAME JOB...: one fio run; prints IOPS, MB/s, p50/p99/p99.9 latency, device bytes per byte.
run() {
    local name=$1; shift
    local w0=$(M device_store_bytes_total) j0=$(M rails_journal_bytes_total) r0=$(M device_retrieve_bytes_total)
    fio --name=v --ioengine=nbd --uri=nbd://127.0.0.1:19809/$name --output-format=json "$@" > $D/fio.json 2> $D/fio.err || { echo "fio failed: $(tail -3 $D/fio.err)"; tail -5 $D/serve.log; return; }
    local w1=$(M device_store_bytes_total) j1=$(M rails_journal_bytes_total) r1=$(M device_retrieve_bytes_total)
    python3 - "$name" "$*" $((w1-w0)) $((j1-j0)) $((r1-r0)) $D/fio.json <<'PY'
import json, sys
name, job, w, j, r, path = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
text = open(path).read()  # fio's nbd engine prints a line before the JSON
jb = json.loads(text[text.index("{"):])["jobs"][0]
for kind in ("write", "read"):
    k = jb[kind]
    if k["io_bytes"] == 0:
        continue
    lat = k["clat_ns"]["percentile"]
    dev = (w + j) if kind == "write" else r
    print(f"| {name} | {job.replace('--', '')} | {kind} | {k['iops']:.0f} | {k['bw_bytes']/1e6:.1f} | "
          f"{lat['50.000000']/1e3:.0f} | {lat['99.000000']/1e3:.0f} | {lat['99.900000']/1e3:.0f} | "
          f"{dev / k['io_bytes']:.2f} |")
PY
}
echo "| volume | fio job | op | IOPS | MB/s | p50 us | p99 us | p99.9 us | device bytes / byte |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for spec in "s4m split3+3 4MiB" "s64k split3+3 64KiB" "r64k rep3 64KiB" "p4k pack3+3 4KiB" "hyb hybrid 4MiB"; do
    set -- $spec
    V create $1 --size 1GiB --mechanism $2 --object-size $3
    run $1 --rw=write --bs=1M --size=256M --iodepth=8
    run $1 --rw=randwrite --bs=4k --size=256M --iodepth=16 --time_based --runtime=$T
    run $1 --rw=randread --bs=4k --size=256M --iodepth=32 --time_based --runtime=$T
done
run s4m --rw=write --bs=128k --size=256M --iodepth=16 --time_based --runtime=$T
run s4m --rw=read --bs=128k --size=256M --iodepth=16 --time_based --runtime=$T
kill $PID; wait $PID
echo
echo "raw file device, 4 KiB random reads at QD32 (railstore bench device):"
$BIN bench device --backend file --path $D/dev --pattern randread --value-size 4096 --qd 32 --duration $T 2>&1 | tail -3
rm -rf $D
