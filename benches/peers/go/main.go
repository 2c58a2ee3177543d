// Command schedpeers runs fastctl's scheduler benchmark workloads against the two Go queues
// that Kubernetes controllers use: client-go's rate-limiting workqueue
// (k8s.io/client-go/util/workqueue) and controller-runtime's priority queue
// (sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue), both as ordinary module
// dependencies, both with string keys.
//
// It prints one JSON object per line on stdout, one per (impl, workload, n), with the median
// of the repetitions in ns_per_item and every sample in samples. Progress goes to stderr.
// benches/peers/run_scheduler_peers.py builds and runs it and runs the same workloads
// against fastctl.Scheduler; the workloads are described there and in docs/benchmarks.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// queue is what both peers implement; controller-runtime's PriorityQueue embeds it.
type queue = workqueue.TypedRateLimitingInterface[string]

// impls maps a result's "impl" name to a constructor. A non-empty name turns the queues'
// Prometheus metrics on (both skip metrics for an unnamed queue, as their own benchmarks do).
var impls = map[string]func(name string) queue{
	"client-go": func(name string) queue {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name},
		)
	},
	"controller-runtime": func(name string) queue {
		return priorityqueue.New[string](name)
	},
}

// modules maps an impl to the module whose version is reported with its results.
var modules = map[string]string{
	"client-go":          "k8s.io/client-go",
	"controller-runtime": "sigs.k8s.io/controller-runtime",
}

// sample is one repetition: wall time of the timed phases, process CPU time over the whole
// repetition, and named sub-phases (wall).
type sample struct {
	wall   time.Duration
	cpu    time.Duration
	phases map[string]time.Duration
}

// result is one output line.
type result struct {
	Impl      string             `json:"impl"`
	Workload  string             `json:"workload"`
	N         int                `json:"n"`
	NsPerItem float64            `json:"ns_per_item"`
	CPUNs     float64            `json:"cpu_ns_per_item"`
	Phases    map[string]float64 `json:"phase_ns_per_item,omitempty"`
	WallS     float64            `json:"wall_s"`
	ItemsPerS float64            `json:"items_per_s"`
	Reps      int                `json:"reps"`
	Samples   []float64          `json:"samples"`
	Metric    string             `json:"metric"`
	Metrics   bool               `json:"metrics"`
	Params    map[string]any     `json:"params,omitempty"`
	Version   string             `json:"version"`
	Go        string             `json:"go"`
	Procs     int                `json:"gomaxprocs"`
	OthersCPU float64            `json:"others_cpu"`
}

type config struct {
	sizes     []int
	mergeN    int
	delayedN  int
	maxDelay  time.Duration
	workers   []int
	perWorker int
	work      time.Duration
	reps      int
	metrics   bool
}

func main() {
	var (
		implList     = flag.String("impls", "client-go,controller-runtime", "comma-separated queues to measure")
		workloadList = flag.String("workloads", "cycle,merge,delayed,contended", "comma-separated workloads")
		sizeList     = flag.String("sizes", "1000,100000,1000000", "key counts for the cycle workload")
		workerList   = flag.String("workers", "10,100,1000", "worker goroutines in the contended workload")
		cfg          config
	)
	flag.IntVar(&cfg.mergeN, "merge-n", 100_000, "keys queued (and re-added) in the merge workloads")
	flag.IntVar(&cfg.delayedN, "delayed-n", 100_000, "keys in the delayed workload")
	flag.DurationVar(&cfg.maxDelay, "max-delay", time.Second, "delays are uniform in [0, max-delay)")
	flag.IntVar(&cfg.perWorker, "items-per-worker", 1000, "keys per worker in the contended workload")
	flag.DurationVar(&cfg.work, "work", time.Millisecond, "simulated work per item in the contended workload")
	flag.IntVar(&cfg.reps, "reps", 0, "repetitions per case (0: a default per workload and size)")
	flag.BoolVar(&cfg.metrics, "metrics", false, "name the queues, which turns their Prometheus metrics on")
	flag.Parse()

	var err error
	if cfg.sizes, err = parseInts(*sizeList); err != nil {
		fatalf("-sizes: %v", err)
	}
	if cfg.workers, err = parseInts(*workerList); err != nil {
		fatalf("-workers: %v", err)
	}
	names := strings.Split(*implList, ",")
	for _, name := range names {
		if impls[name] == nil {
			fatalf("unknown impl %q", name)
		}
	}
	versions := moduleVersions()
	enc := json.NewEncoder(os.Stdout)
	for _, workload := range strings.Split(*workloadList, ",") {
		cases, ok := workloads[workload]
		if !ok {
			fatalf("unknown workload %q", workload)
		}
		for _, c := range cases(cfg) {
			for _, name := range names {
				fmt.Fprintf(os.Stderr, "%s %s n=%d ...\n", name, c.workload, c.n)
				r := measure(c, name, cfg)
				r.Version = versions[modules[name]]
				if err := enc.Encode(r); err != nil {
					fatalf("write: %v", err)
				}
			}
		}
	}
}

// benchCase is one workload at one size; run does one repetition on a fresh queue.
type benchCase struct {
	workload string
	n        int
	reps     int
	metric   string // what ns_per_item measures: "wall" or "cpu"
	params   map[string]any
	run      func(newQueue func() queue) sample
}

var workloads = map[string]func(config) []benchCase{
	"cycle": func(cfg config) []benchCase {
		var cases []benchCase
		for _, n := range cfg.sizes {
			keys := makeKeys(n)
			cases = append(cases, benchCase{
				workload: "cycle", n: n, reps: repsFor(cfg, n), metric: "wall",
				run: func(newQueue func() queue) sample { return cycle(newQueue(), keys) },
			})
		}
		return cases
	},
	"merge": func(cfg config) []benchCase {
		keys := makeKeys(cfg.mergeN)
		var cases []benchCase
		for _, order := range []string{"sequential", "random"} {
			touched := mergeOrder(keys, order)
			cases = append(cases, benchCase{
				workload: "merge-" + order, n: cfg.mergeN, reps: repsFor(cfg, cfg.mergeN), metric: "wall",
				run: func(newQueue func() queue) sample { return merge(newQueue(), keys, touched) },
			})
		}
		return cases
	},
	"delayed": func(cfg config) []benchCase {
		keys := makeKeys(cfg.delayedN)
		rng := rand.New(rand.NewPCG(7, 7))
		delays := make([]time.Duration, len(keys))
		for i := range delays {
			delays[i] = time.Duration(rng.Int64N(int64(cfg.maxDelay)))
		}
		return []benchCase{{
			workload: "delayed", n: cfg.delayedN, reps: repsFor(cfg, cfg.delayedN), metric: "cpu",
			params: map[string]any{"max_delay_s": cfg.maxDelay.Seconds()},
			run: func(newQueue func() queue) sample {
				return delayed(newQueue(), keys, delays, cfg.maxDelay)
			},
		}}
	},
	"contended": func(cfg config) []benchCase {
		reps := cfg.reps
		if reps == 0 {
			reps = 3
		}
		var cases []benchCase
		for _, workers := range cfg.workers {
			n := workers * cfg.perWorker
			keys := makeKeys(n)
			cases = append(cases, benchCase{
				workload: "contended", n: n, reps: reps, metric: "wall",
				params: map[string]any{
					"workers": workers, "work_s": cfg.work.Seconds(), "mode": "goroutines",
					"ideal_s": cfg.work.Seconds() * float64(cfg.perWorker),
				},
				run: func(newQueue func() queue) sample {
					return contended(newQueue(), keys, workers, cfg.work)
				},
			})
		}
		return cases
	},
}

func measure(c benchCase, impl string, cfg config) result {
	name := ""
	if cfg.metrics {
		name = "bench"
	}
	newQueue := func() queue { return impls[impl](name) }
	if c.workload != "contended" { // warm-up (a contended repetition is long enough)
		c.run(newQueue)
	}
	var walls, cpus []float64
	phases := map[string][]float64{}
	others := startOthers()
	for range c.reps {
		runtime.GC()
		s := c.run(newQueue)
		walls = append(walls, perItem(s.wall, c.n))
		cpus = append(cpus, perItem(s.cpu, c.n))
		for k, d := range s.phases {
			phases[k] = append(phases[k], perItem(d, c.n))
		}
	}
	samples := walls
	if c.metric == "cpu" {
		samples = cpus
	}
	r := result{
		Impl: impl, Workload: c.workload, N: c.n, NsPerItem: median(samples), CPUNs: median(cpus),
		WallS: median(walls) * float64(c.n) / 1e9, Reps: c.reps, Samples: samples,
		Metric: c.metric, Metrics: cfg.metrics, Params: c.params, Go: runtime.Version(),
		Procs: runtime.GOMAXPROCS(0), Phases: map[string]float64{},
	}
	r.ItemsPerS = float64(c.n) / r.WallS
	r.OthersCPU = others()
	for k, v := range phases {
		r.Phases[k] = median(v)
	}
	return r
}

// cycle adds every key, then gets and finishes every key, one at a time.
func cycle(q queue, keys []string) sample {
	defer q.ShutDown()
	c0, t0 := cpuTime(), time.Now()
	for _, k := range keys {
		q.Add(k)
	}
	q.Len() // controller-runtime buffers adds; Len applies them
	t1 := time.Now()
	for range keys {
		k, _ := q.Get()
		q.Done(k)
	}
	t2, cpu := time.Now(), cpuTime()-c0
	mustBeEmpty(q)
	return sample{
		wall: t2.Sub(t0), cpu: cpu,
		phases: map[string]time.Duration{"add": t1.Sub(t0), "get_done": t2.Sub(t1)},
	}
}

// merge queues every key (not timed), then adds the keys again in the order touched: each
// add finds its key already queued.
func merge(q queue, keys, touched []string) sample {
	defer q.ShutDown()
	for _, k := range keys {
		q.Add(k)
	}
	q.Len()
	c0, t0 := cpuTime(), time.Now()
	for _, k := range touched {
		q.Add(k)
	}
	l := q.Len() // and the merges have been applied
	wall, cpu := time.Since(t0), cpuTime()-c0
	if l != len(keys) {
		fatalf("merge: %d keys queued, want %d", l, len(keys))
	}
	return sample{wall: wall, cpu: cpu}
}

// delayed adds every key with its delay, sleeps until the last one is due, and then gets and
// finishes every key. Its figure is process CPU time over all of that, because the Go queues
// move due keys from their delay structures in background goroutines while the caller
// sleeps; the wall-time phases leave that work out.
func delayed(q queue, keys []string, delays []time.Duration, maxDelay time.Duration) sample {
	defer q.ShutDown()
	c0 := cpuTime()
	t0 := time.Now()
	for i, k := range keys {
		q.AddAfter(k, delays[i])
	}
	q.Len()
	t1 := time.Now()
	time.Sleep(time.Until(t1.Add(maxDelay + 10*time.Millisecond))) // all due
	t2 := time.Now()
	for range keys {
		k, _ := q.Get()
		q.Done(k)
	}
	t3 := time.Now()
	cpu := cpuTime() - c0
	mustBeEmpty(q)
	return sample{
		wall: t1.Sub(t0) + t3.Sub(t2), cpu: cpu,
		phases: map[string]time.Duration{"add": t1.Sub(t0), "get_done": t3.Sub(t2)},
	}
}

// contended queues every key (not timed) and drains the queue with `workers` goroutines,
// each of which gets a key, sleeps `work` and finishes it.
func contended(q queue, keys []string, workers int, work time.Duration) sample {
	for _, k := range keys {
		q.Add(k)
	}
	q.Len()
	var (
		finished  atomic.Int64
		drained   = make(chan struct{})
		wg        sync.WaitGroup
		n         = int64(len(keys))
		c0, start = cpuTime(), time.Now()
	)
	for range workers {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				time.Sleep(work)
				q.Done(k)
				if finished.Add(1) == n {
					close(drained)
				}
			}
		})
	}
	<-drained
	wall, cpu := time.Since(start), cpuTime()-c0
	q.ShutDown()
	wg.Wait()
	return sample{wall: wall, cpu: cpu}
}

// makeKeys returns n keys shaped like "namespace/name", as the Python benchmarks use.
func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("namespace-%02d/object-%08d", i%97, i)
	}
	return keys
}

// mergeOrder is the order of the merge-path adds: key order, or a stride of 7919 (a prime
// that does not divide the key count), which scatters the accesses.
func mergeOrder(keys []string, order string) []string {
	stride := 1
	if order == "random" {
		stride = 7919
	}
	touched := make([]string, len(keys))
	for j := range touched {
		touched[j] = keys[(j*stride)%len(keys)]
	}
	return touched
}

func repsFor(cfg config, n int) int {
	switch {
	case cfg.reps > 0:
		return cfg.reps
	case n <= 10_000:
		return 51
	case n <= 100_000:
		return 7
	default:
		return 5
	}
}

func mustBeEmpty(q queue) {
	if l := q.Len(); l != 0 {
		fatalf("%d keys left in the queue", l)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startOthers starts measuring the share of the machine's CPU time that other processes
// use; the function it returns gives that share (0 to 1) since the start.
func startOthers() func() float64 {
	busy0, own0, t0 := machineBusy(), cpuTime(), time.Now()
	return func() float64 {
		others := (machineBusy() - busy0) - (cpuTime() - own0)
		return max(0, others.Seconds()/(time.Since(t0).Seconds()*float64(runtime.NumCPU())))
	}
}

// machineBusy is the CPU time all processes have used since boot (the "cpu" line of
// /proc/stat, less idle and iowait), assuming the usual 100 clock ticks per second.
func machineBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	var busy int64
	for i, f := range fields[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is already in user
			busy += v
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

func perItem(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("not a positive integer: %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// moduleVersions maps module paths to the versions this binary was built with.
func moduleVersions() map[string]string {
	versions := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			versions[m.Path] = m.Version
		}
	}
	return versions
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "schedpeers: "+format+"\n", args...)
	os.Exit(1)
}
