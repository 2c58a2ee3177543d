// The e2e bench's Widget operator on controller-runtime: the same work as fastctl's bench
// operator. For each Widget whose status.observedGeneration differs from
// metadata.generation, write status: {observedGeneration, items} with one merge patch of
// the status subresource; anything else is a no-op.
//
// controller-runtime's defaults (its config loader, its manager, its cache) except
// MaxConcurrentReconciles = --concurrency, the cache limited to --namespace, the
// metrics server off (its default port would collide between runs), and the client reading
// unstructured objects from the cache as it reads typed ones; the object is unstructured
// (no generated types).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var widgetGVK = schema.GroupVersionKind{Group: "demo.fastctl.dev", Version: "v1", Kind: "Widget"}

type reconciler struct {
	client client.Client
}

// statusFor is the status patch a Widget needs, or nil when it is up to date.
func statusFor(obj *unstructured.Unstructured) map[string]any {
	generation := obj.GetGeneration()
	observed, found, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	if found && observed == generation {
		return nil
	}
	data, _, _ := unstructured.NestedMap(obj.Object, "spec", "data")
	return map[string]any{
		"status": map[string]any{"observedGeneration": generation, "items": len(data)},
	}
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(widgetGVK)
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	status := statusFor(obj)
	if status == nil {
		return ctrl.Result{}, nil
	}
	body, err := json.Marshal(status)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body))
}

func main() {
	// controller-runtime registers --kubeconfig itself; its loader (and its defaults, such
	// as its client-side rate limits) reads it.
	namespace := flag.String("namespace", "", "the namespace to watch")
	concurrency := flag.Int("concurrency", 32, "MaxConcurrentReconciles")
	flag.Parse()
	if flag.Lookup("kubeconfig").Value.String() == "" || *namespace == "" {
		fmt.Fprintln(os.Stderr, "usage: widget-operator --kubeconfig=PATH --namespace=NAME [--concurrency=N]")
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
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Typed objects are read from the cache by default, unstructured ones from the API
		// server unless asked: without this every reconcile would GET its Widget (a typed
		// struct would behave as this does).
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetGVK)
	err = ctrl.NewControllerManagedBy(mgr).
		For(widget).
		WithOptions(controller.Options{MaxConcurrentReconciles: *concurrency}).
		Complete(&reconciler{client: mgr.GetClient()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "manager stopped:", err)
		os.Exit(1)
	}
}
