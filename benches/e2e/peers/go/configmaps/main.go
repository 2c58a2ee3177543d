// The scale benchmark's ConfigMap operator on controller-runtime: it caches every
// ConfigMap of one namespace and reconciles each once, doing nothing but reading it from
// the cache. Beside the Widget operator (same module, same pinned dependencies).
//
// controller-runtime's defaults (its config loader, manager, cache, typed client reading
// from the cache) except MaxConcurrentReconciles = --concurrency, the cache limited to
// --namespace, and the metrics server off. The object is the typed corev1.ConfigMap, as a
// user would write it.
//
// It prints JSON lines on stdout, times as wall-clock seconds since the epoch (the driver
// compares them with its own; Go does not expose CLOCK_MONOTONIC's value):
//
//	{"cached": t}                               the informer has synced its initial list
//	{"first_reconcile": t}                      the first reconcile started
//	{"all_first": t, "cpu_seconds": c}          --expect reconciles done (CPU of the process)
//	{"settled": t}                              after a full GC returned memory to the OS
//	{"seen": seq, "t": t, "reconciles": n}      a reconcile saw a new value of the seq annotation
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const seqAnnotation = "e2e.fastctl.dev/seq"

var (
	outMu sync.Mutex
)

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func emit(message map[string]any) {
	line, _ := json.Marshal(message)
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

// cpuSeconds is the process's user + system CPU time from /proc/self/stat (clock ticks of
// 1/100 s, Linux's USER_HZ).
func cpuSeconds() float64 {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	text := string(data)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

type state struct {
	expect     int64
	reconciles atomic.Int64
	settled    sync.Once
	seqMu      sync.Mutex
	lastSeq    string
}

// settle reports the CPU spent until every object was reconciled once, then collects
// garbage and returns the freed memory to the OS, so the driver's RSS reading holds what
// the cache keeps.
func (s *state) settle() {
	s.settled.Do(func() {
		emit(map[string]any{"all_first": now(), "cpu_seconds": cpuSeconds()})
		runtime.GC()
		debug.FreeOSMemory()
		emit(map[string]any{"settled": now()})
	})
}

type reconciler struct {
	client client.Client
	state  *state
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := now()
	n := r.state.reconciles.Add(1)
	if n == 1 {
		emit(map[string]any{"first_reconcile": t})
	}
	obj := &corev1.ConfigMap{}
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if seq, ok := obj.Annotations[seqAnnotation]; ok {
		r.state.seqMu.Lock()
		fresh := seq != r.state.lastSeq
		r.state.lastSeq = seq
		r.state.seqMu.Unlock()
		if fresh {
			emit(map[string]any{"seen": seq, "t": t, "reconciles": n})
		}
	}
	if n == r.state.expect {
		go r.state.settle()
	}
	return ctrl.Result{}, nil
}

func main() {
	namespace := flag.String("namespace", "", "the namespace to watch")
	concurrency := flag.Int("concurrency", 32, "MaxConcurrentReconciles")
	expect := flag.Int64("expect", 0, "reconciles until the initial list is done")
	flag.Parse()
	if flag.Lookup("kubeconfig").Value.String() == "" || *namespace == "" {
		fmt.Fprintln(os.Stderr, "usage: configmap-operator --kubeconfig=PATH --namespace=NAME [--concurrency=N] [--expect=N]")
		os.Exit(2)
	}
	ctrl.SetLogger(funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{}))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(1)
	}
	// controller-runtime asks for protobuf for built-in kinds (apiutil's protobuf scheme),
	// JSON for custom resources. CONFIGMAP_OPERATOR_JSON=1 asks for JSON, the encoding
	// fastctl reads, to compare list times on the same bytes from the API server.
	if os.Getenv("CONFIGMAP_OPERATOR_JSON") == "1" {
		cfg.ContentType = "application/json"
		cfg.AcceptContentTypes = "application/json"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
	st := &state{expect: *expect}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: *concurrency}).
		Complete(&reconciler{client: mgr.GetClient(), state: st})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	// The controller's own informer (one per type): registered now, started with the cache.
	informer, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
	go func() {
		// Polled every 5 ms: client-go's WaitForCacheSync polls every 100 ms.
		for !informer.HasSynced() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		emit(map[string]any{"cached": now()})
		if st.expect == 0 {
			st.settle()
		}
	}()
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "manager stopped:", err)
		os.Exit(1)
	}
}
