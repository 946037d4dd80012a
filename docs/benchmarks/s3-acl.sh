#!/bin/bash
# The 4 KiB S3 GET and PUT rates of two railstore binaries, alternating, 3 rounds
# (docs/benchmarks/s3.md, "Users and ACLs"). Usage: s3-acl.sh BEFORE AFTER [FOLDER]
set -u
before=$1 after=$2 dir=${3:-/tmp/bench}
for round in 1 2 3; do
    for bin in "$before" "$after"; do
        for w in get put; do
            rm -rf "$dir" && mkdir -p "$dir"
            line=$("$bin" bench s3 --path "$dir/data" --size 4KiB --clients 16 --workload "$w" \
                --duration 6s --rounds 1 --objects 1000 --no-baseline 2>&1 | grep -E '^s3 ')
            echo "round $round $bin $w: $line"
            sync
            sleep 2
        done
    done
done
