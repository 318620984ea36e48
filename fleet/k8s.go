package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// InferencePoolGVR is the Gateway API Inference Extension's InferencePool
// resource read in mode inferencepool.
var InferencePoolGVR = schema.GroupVersionResource{
	Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools",
}

// Pod annotations read by the Kubernetes discoverers.
const (
	// AnnotationModels lists the models a pod serves, comma-separated
	// (overrides endpoints.models).
	AnnotationModels = "trimtab.io/models"
	// AnnotationCapacity is the pod's relative capacity weight.
	AnnotationCapacity = "trimtab.io/capacity"
	// AnnotationEngine overrides scrape.engine for the pod.
	AnnotationEngine = "trimtab.io/engine"
)

// NewKubeClients builds Kubernetes clients from a kubeconfig path, or from
// the in-cluster service account when kubeconfig is empty. It reads the
// environment (in-cluster config), so only cmd should call it.
func NewKubeClients(kubeconfig string) (kubernetes.Interface, dynamic.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: kubernetes config: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: kubernetes client: %w", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: kubernetes dynamic client: %w", err)
	}
	return kc, dc, nil
}

// Kube discovers endpoints with client-go shared informers, in one of
// three modes: pods matching a label selector, the EndpointSlices of a
// Service, or the pods selected by an InferencePool. Every informer event
// (and every resync) rebuilds the target list from the listers; an
// unchanged list is not reported again.
type Kube struct {
	cfg  EndpointsConfig
	kube kubernetes.Interface
	dyn  dynamic.Interface
	log  *slog.Logger
	sel  labels.Selector
}

// NewKube returns a Kubernetes discoverer for cfg (mode pods,
// endpointslices or inferencepool). dyn is needed for inferencepool only.
func NewKube(cfg EndpointsConfig, kube kubernetes.Interface, dyn dynamic.Interface, log *slog.Logger) (*Kube, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Kube{cfg: cfg, kube: kube, dyn: dyn, log: log, sel: labels.Everything()}
	switch cfg.Mode {
	case ModePods:
		sel, err := labels.Parse(cfg.Selector)
		if err != nil {
			return nil, fmt.Errorf("fleet: endpoints.selector: %w", err)
		}
		k.sel = sel
	case ModeEndpointSlices:
	case ModeInferencePool:
		if dyn == nil {
			return nil, errors.New("fleet: mode inferencepool needs a dynamic client")
		}
	default:
		return nil, fmt.Errorf("fleet: endpoints.mode %q is not a Kubernetes mode", cfg.Mode)
	}
	if kube == nil {
		return nil, errors.New("fleet: Kubernetes discovery needs a client")
	}
	return k, nil
}

// Run implements Discoverer.
func (k *Kube) Run(ctx context.Context, sink Sink) error {
	notify := make(chan struct{}, 1)
	poke := func() {
		select {
		case notify <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	ns := k.cfg.Namespace
	var synced []cache.InformerSynced
	var build func() ([]Target, error)

	var tweak func(*metav1.ListOptions)
	switch k.cfg.Mode {
	case ModePods:
		tweak = func(o *metav1.ListOptions) { o.LabelSelector = k.cfg.Selector }
	case ModeEndpointSlices:
		tweak = func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + k.cfg.Service }
	}
	opts := []informers.SharedInformerOption{informers.WithNamespace(ns)}
	if tweak != nil {
		opts = append(opts, informers.WithTweakListOptions(tweak))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(k.kube, k.cfg.Resync, opts...)
	defer factory.Shutdown()

	switch k.cfg.Mode {
	case ModePods:
		pods := factory.Core().V1().Pods()
		if _, err := pods.Informer().AddEventHandler(handler); err != nil {
			return err
		}
		synced = append(synced, pods.Informer().HasSynced)
		build = func() ([]Target, error) {
			list, err := pods.Lister().Pods(ns).List(k.sel)
			if err != nil {
				return nil, err
			}
			return k.podTargets(list, []int{k.cfg.TargetPort}), nil
		}
	case ModeEndpointSlices:
		es := factory.Discovery().V1().EndpointSlices()
		if _, err := es.Informer().AddEventHandler(handler); err != nil {
			return err
		}
		synced = append(synced, es.Informer().HasSynced)
		sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: k.cfg.Service})
		build = func() ([]Target, error) {
			list, err := es.Lister().EndpointSlices(ns).List(sel)
			if err != nil {
				return nil, err
			}
			return k.sliceTargets(list), nil
		}
	case ModeInferencePool:
		dfactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(k.dyn, k.cfg.Resync, ns, nil)
		defer dfactory.Shutdown()
		pools := dfactory.ForResource(InferencePoolGVR)
		if _, err := pools.Informer().AddEventHandler(handler); err != nil {
			return err
		}
		pods := factory.Core().V1().Pods()
		if _, err := pods.Informer().AddEventHandler(handler); err != nil {
			return err
		}
		synced = append(synced, pools.Informer().HasSynced, pods.Informer().HasSynced)
		build = func() ([]Target, error) {
			obj, err := pools.Lister().ByNamespace(ns).Get(k.cfg.Pool)
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("InferencePool %s/%s not found", ns, k.cfg.Pool)
			}
			if err != nil {
				return nil, err
			}
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return nil, fmt.Errorf("InferencePool %s/%s: unexpected type %T", ns, k.cfg.Pool, obj)
			}
			sel, ports, err := ParseInferencePool(u)
			if err != nil {
				return nil, err
			}
			list, err := pods.Lister().Pods(ns).List(sel)
			if err != nil {
				return nil, err
			}
			return k.podTargets(list, ports), nil
		}
		dfactory.Start(ctx.Done())
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended before the caches synced
	}

	var last []Target
	first := true
	var lastErr string
	for {
		targets, err := build()
		switch {
		case err != nil:
			// Keep the previous list; report each distinct problem once.
			if err.Error() != lastErr {
				lastErr = err.Error()
				sink.Error(err)
			}
		case first || !reflect.DeepEqual(targets, last):
			first, last, lastErr = false, targets, ""
			sink.Update(slices.Clone(targets))
		default:
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-notify:
		}
	}
}

// ParseInferencePool reads an inference.networking.k8s.io/v1 InferencePool:
// spec.selector.matchLabels (the pods) and spec.targetPorts[].number (one
// endpoint per port per pod).
func ParseInferencePool(u *unstructured.Unstructured) (labels.Selector, []int, error) {
	name := u.GetNamespace() + "/" + u.GetName()
	ml, found, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil {
		return nil, nil, fmt.Errorf("InferencePool %s: spec.selector.matchLabels: %w", name, err)
	}
	if !found || len(ml) == 0 {
		return nil, nil, fmt.Errorf("InferencePool %s: spec.selector.matchLabels is empty", name)
	}
	sel, err := labels.ValidatedSelectorFromSet(ml)
	if err != nil {
		return nil, nil, fmt.Errorf("InferencePool %s: spec.selector.matchLabels: %w", name, err)
	}
	tps, found, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err != nil || !found || len(tps) == 0 {
		return nil, nil, fmt.Errorf("InferencePool %s: spec.targetPorts: want a non-empty list", name)
	}
	var ports []int
	for i, tp := range tps {
		m, ok := tp.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("InferencePool %s: spec.targetPorts[%d]: not an object", name, i)
		}
		n, ok, _ := unstructured.NestedInt64(m, "number")
		if !ok || n <= 0 || n > 65535 {
			return nil, nil, fmt.Errorf("InferencePool %s: spec.targetPorts[%d].number: want 1…65535", name, i)
		}
		ports = append(ports, int(n))
	}
	return sel, ports, nil
}

// podTargets turns pods into targets, one per port (named pod-rank-N when
// there are several). Pods without an IP are skipped; terminating, not
// running or not ready pods are reported not ready.
func (k *Kube) podTargets(pods []*corev1.Pod, ports []int) []Target {
	var out []Target
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		ready := p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p)
		for i, port := range ports {
			t := Target{
				Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)),
				Name:    p.Name,
				Labels:  p.Labels,
				Ready:   ready,
			}
			if len(ports) > 1 {
				t.Name = p.Name + "-rank-" + strconv.Itoa(i)
			}
			k.annotate(&t, p.Annotations, p.Name)
			out = append(out, t)
		}
	}
	sortTargets(out)
	return out
}

func (k *Kube) annotate(t *Target, ann map[string]string, obj string) {
	t.Models = k.cfg.Models
	t.Capacity = 1
	if v := ann[AnnotationModels]; v != "" {
		t.Models = splitList(v)
	}
	if v := ann[AnnotationCapacity]; v != "" {
		if c, err := strconv.ParseFloat(v, 64); err == nil && c > 0 && c <= 1e6 {
			t.Capacity = c
		} else {
			k.log.Warn("ignoring bad annotation", "pod", obj, "annotation", AnnotationCapacity, "value", v)
		}
	}
	if v := ann[AnnotationEngine]; v != "" {
		if _, ok := EngineMapping(v); ok {
			t.Engine = v
		} else {
			k.log.Warn("ignoring bad annotation", "pod", obj, "annotation", AnnotationEngine, "value", v)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sliceTargets turns EndpointSlices into targets. The port is the slice
// port numbered endpoints.target_port, or the first port when it is 0; an
// endpoint in several slices counts once (ready wins).
func (k *Kube) sliceTargets(list []*discoveryv1.EndpointSlice) []Target {
	byAddr := map[string]Target{}
	for _, s := range list {
		port := 0
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			if k.cfg.TargetPort == 0 || int(*p.Port) == k.cfg.TargetPort {
				port = int(*p.Port)
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			name := ""
			if e.TargetRef != nil {
				name = e.TargetRef.Name
			}
			for _, a := range e.Addresses {
				t := Target{Address: net.JoinHostPort(a, strconv.Itoa(port)), Name: name, Ready: ready}
				if e.Zone != nil {
					t.Labels = map[string]string{corev1.LabelTopologyZone: *e.Zone}
				}
				k.annotate(&t, nil, name)
				if old, ok := byAddr[t.Address]; ok && old.Ready {
					continue
				}
				byAddr[t.Address] = t
			}
		}
	}
	out := make([]Target, 0, len(byAddr))
	for _, t := range byAddr {
		out = append(out, t)
	}
	sortTargets(out)
	return out
}

func sortTargets(ts []Target) {
	slices.SortFunc(ts, func(a, b Target) int { return strings.Compare(a.Address, b.Address) })
}
