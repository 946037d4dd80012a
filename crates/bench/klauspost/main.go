// The klauspost/reedsolomon side of `railstore ec-bench --against klauspost`: one point of
// EC-Bench timed the way ec-bench times railstore's engines (the same k, m, chunk, operation,
// minimum time and repeats; one stripe of 64-byte-aligned shards, coded over and over, so it
// sits in cache), on one goroutine and GOMAXPROCS=1 (the caller pins the process to one core).
// Prints one JSON object: user-data GB/s per measurement, operations, latency percentiles.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"syscall"
	"time"

	"github.com/klauspost/reedsolomon"
)

type result struct {
	Version string    `json:"version"`
	Rates   []float64 `json:"rates_gbps"`
	Ops     int       `json:"ops"`
	LatNs   []float64 `json:"lat_ns_mean_p50_p99"`
	CodingS float64   `json:"coding_s"`
	CPUS    float64   `json:"cpu_s"`
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	k := flag.Int("k", 6, "data shards")
	m := flag.Int("m", 3, "parity shards")
	chunk := flag.Int("chunk", 65536, "bytes per shard")
	op := flag.String("op", "encode", "encode or decode")
	minTime := flag.Float64("min-time", 0.05, "seconds of coding per measurement")
	repeat := flag.Int("repeat", 5, "measurements")
	seed := flag.Int64("seed", 1, "seed of the data and the erasure patterns")
	flag.Parse()
	runtime.GOMAXPROCS(1)

	enc, err := reedsolomon.New(*k, *m, reedsolomon.WithMaxGoroutines(1),
		reedsolomon.WithCauchyMatrix())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	n := *k + *m
	shards := reedsolomon.AllocAligned(n, *chunk)
	rng := rand.New(rand.NewSource(*seed))
	for i := 0; i < *k; i++ {
		rng.Read(shards[i])
	}
	if err := enc.Encode(shards); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lost := make([]bool, n)
	one := func() error {
		if *op == "encode" {
			return enc.Encode(shards)
		}
		// Lose m random shards, data and parity alike, and rebuild them in place.
		for i := range lost {
			lost[i] = false
		}
		for gone := 0; gone < *m; {
			i := rng.Intn(n)
			if !lost[i] {
				lost[i] = true
				shards[i] = shards[i][:0]
				gone++
			}
		}
		return enc.Reconstruct(shards)
	}
	if *op != "encode" && *op != "decode" {
		fmt.Fprintln(os.Stderr, "op must be encode or decode")
		os.Exit(2)
	}

	var res result
	res.Version = "github.com/klauspost/reedsolomon v1.14.2"
	var lat []int64
	user := float64(*k * *chunk)
	for r := 0; r < *repeat; r++ {
		if err := one(); err != nil { // warm-up, untimed
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var ns int64
		ops := 0
		cpu := cpuSeconds()
		for ops < 3 || float64(ns) < *minTime*1e9 {
			t := time.Now()
			if err := one(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			d := time.Since(t).Nanoseconds()
			lat = append(lat, d)
			ns += d
			ops++
		}
		res.CPUS += cpuSeconds() - cpu
		res.CodingS += float64(ns) / 1e9
		res.Rates = append(res.Rates, user*float64(ops)/float64(ns))
		res.Ops += ops
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	var sum float64
	for _, d := range lat {
		sum += float64(d)
	}
	res.LatNs = []float64{sum / float64(len(lat)), float64(lat[len(lat)/2]),
		float64(lat[(len(lat)-1)*99/100])}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}
