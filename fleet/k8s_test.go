package fleet

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/trimtab/trimtab/scheduler"
)

const ns = "inference"

func pod(name, ip string, ready bool, labels map[string]string, ann map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
		},
	}
}

// describe renders targets compactly: address, ready flag, name.
func describe(ts []Target) string {
	var s []string
	for _, t := range ts {
		r := "-"
		if t.Ready {
			r = "+"
		}
		s = append(s, r+t.Address+"("+t.Name+")")
	}
	return strings.Join(s, " ")
}

// runKube runs a Kube discoverer until the test ends.
func runKube(t *testing.T, k *Kube) *recordingSink {
	sink := newRecordingSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sink
}

func expectTargets(t *testing.T, sink *recordingSink, want string) {
	t.Helper()
	waitFor(t, want, func() bool { return describe(sink.last()) == want }, nil)
}

func TestKubePods(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	kc := fake.NewClientset(
		pod("a", "10.0.0.1", true, vllm, nil),
		pod("b", "10.0.0.2", false, vllm, nil),
		pod("c", "10.0.0.3", true, map[string]string{"app": "other"}, nil),
		pod("pending", "", false, vllm, nil),
	)
	cfg := EndpointsConfig{Mode: ModePods, Namespace: ns, Selector: "app=vllm", TargetPort: 8000,
		Models: []string{"llama"}, Resync: time.Minute}
	k, err := NewKube(cfg, kc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := runKube(t, k)
	ctx := context.Background()
	pods := kc.CoreV1().Pods(ns)

	// c does not match the selector; the pending pod has no IP yet.
	expectTargets(t, sink, "+10.0.0.1:8000(a) -10.0.0.2:8000(b)")
	if got := sink.last()[0]; got.Models[0] != "llama" || got.Capacity != 1 || got.Labels["app"] != "vllm" {
		t.Errorf("target a = %+v", got)
	}

	// readiness flip
	if _, err := pods.UpdateStatus(ctx, pod("b", "10.0.0.2", true, vllm, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.0.1:8000(a) +10.0.0.2:8000(b)")

	// delete
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.0.2:8000(b)")

	// add, with annotations overriding models, capacity and engine
	ann := map[string]string{AnnotationModels: "x, y", AnnotationCapacity: "2", AnnotationEngine: "sglang"}
	if _, err := pods.Create(ctx, pod("d", "10.0.0.4", true, vllm, ann), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.0.2:8000(b) +10.0.0.4:8000(d)")
	d := sink.last()[1]
	if strings.Join(d.Models, ",") != "x,y" || d.Capacity != 2 || d.Engine != "sglang" {
		t.Errorf("annotated target = %+v", d)
	}

	// a terminating pod is not ready
	term := pod("b", "10.0.0.2", true, vllm, nil)
	term.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	term.Finalizers = []string{"test"}
	if _, err := pods.Update(ctx, term, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "-10.0.0.2:8000(b) +10.0.0.4:8000(d)")
}

func slice(name, service string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
		Endpoints:   eps,
	}
}

func sliceEP(ip, podName string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: podName, Namespace: ns},
		Zone:       ptr.To("zone-a"),
	}
}

func TestKubeEndpointSlices(t *testing.T) {
	kc := fake.NewClientset(
		slice("vllm-abc", "vllm", 8000, sliceEP("10.0.1.1", "p1", true), sliceEP("10.0.1.2", "p2", false)),
		slice("other-abc", "other", 8000, sliceEP("10.0.9.9", "x", true)),
	)
	k, err := NewKube(EndpointsConfig{Mode: ModeEndpointSlices, Namespace: ns, Service: "vllm", Resync: time.Minute}, kc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := runKube(t, k)
	ctx := context.Background()
	slices := kc.DiscoveryV1().EndpointSlices(ns)

	expectTargets(t, sink, "+10.0.1.1:8000(p1) -10.0.1.2:8000(p2)")
	if z := sink.last()[0].Labels[corev1.LabelTopologyZone]; z != "zone-a" {
		t.Errorf("zone label = %q", z)
	}

	// readiness flip and a port change in one update
	if _, err := slices.Update(ctx, slice("vllm-abc", "vllm", 9000, sliceEP("10.0.1.1", "p1", true), sliceEP("10.0.1.2", "p2", true)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.1.1:9000(p1) +10.0.1.2:9000(p2)")

	// a second slice; an endpoint present in both counts once, ready wins
	if _, err := slices.Create(ctx, slice("vllm-def", "vllm", 9000, sliceEP("10.0.1.3", "p3", true), sliceEP("10.0.1.2", "p2", false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.1.1:9000(p1) +10.0.1.2:9000(p2) +10.0.1.3:9000(p3)")

	if err := slices.Delete(ctx, "vllm-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "-10.0.1.2:9000(p2) +10.0.1.3:9000(p3)")
}

func TestKubeEndpointSlicesTargetPort(t *testing.T) {
	two := slice("vllm-abc", "vllm", 8000, sliceEP("10.0.1.1", "p1", true))
	two.Ports = append(two.Ports, discoveryv1.EndpointPort{Name: ptr.To("metrics"), Port: ptr.To(int32(9090))})
	kc := fake.NewClientset(two)
	k, err := NewKube(EndpointsConfig{Mode: ModeEndpointSlices, Namespace: ns, Service: "vllm", TargetPort: 9090, Resync: time.Minute}, kc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	expectTargets(t, runKube(t, k), "+10.0.1.1:9090(p1)")
}

func inferencePool(name string, matchLabels map[string]any, ports ...int64) *unstructured.Unstructured {
	var tps []any
	for _, p := range ports {
		tps = append(tps, map[string]any{"number": p})
	}
	spec := map[string]any{"selector": map[string]any{"matchLabels": matchLabels}}
	if tps != nil {
		spec["targetPorts"] = tps
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}}
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{InferencePoolGVR: "InferencePoolList"}, objs...)
}

func TestKubeInferencePool(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	kc := fake.NewClientset(
		pod("a", "10.0.2.1", true, vllm, nil),
		pod("b", "10.0.2.2", false, vllm, nil),
		pod("c", "10.0.2.3", true, map[string]string{"app": "other"}, nil),
	)
	dc := newDynamic(inferencePool("pool", map[string]any{"app": "vllm"}, 8000),
		inferencePool("unrelated", map[string]any{"app": "other"}, 1234))
	k, err := NewKube(EndpointsConfig{Mode: ModeInferencePool, Namespace: ns, Pool: "pool", Resync: time.Minute}, kc, dc, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := runKube(t, k)
	ctx := context.Background()
	pools := dc.Resource(InferencePoolGVR).Namespace(ns)

	expectTargets(t, sink, "+10.0.2.1:8000(a) -10.0.2.2:8000(b)")

	// a second target port: one endpoint per port per pod
	if _, err := pools.Update(ctx, inferencePool("pool", map[string]any{"app": "vllm"}, 8000, 8001), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.2.1:8000(a-rank-0) +10.0.2.1:8001(a-rank-1) -10.0.2.2:8000(b-rank-0) -10.0.2.2:8001(b-rank-1)")

	// the selector moves to other pods; the pod informer follows
	if _, err := pools.Update(ctx, inferencePool("pool", map[string]any{"app": "other"}, 8000), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "+10.0.2.3:8000(c)")

	// a pod readiness flip under the pool
	if _, err := kc.CoreV1().Pods(ns).UpdateStatus(ctx, pod("c", "10.0.2.3", false, map[string]string{"app": "other"}, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectTargets(t, sink, "-10.0.2.3:8000(c)")

	// a malformed pool keeps the list and reports the field
	updates, _ := sink.counts()
	if _, err := pools.Update(ctx, inferencePool("pool", map[string]any{"app": "other"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "error", func() bool { _, e := sink.counts(); return e > 0 }, nil)
	sink.mu.Lock()
	msg := sink.errs[0].Error()
	sink.mu.Unlock()
	if !strings.Contains(msg, "spec.targetPorts") {
		t.Errorf("error %q does not name spec.targetPorts", msg)
	}
	if u, _ := sink.counts(); u != updates {
		t.Errorf("malformed pool changed the list")
	}

	// deleting the pool is reported too
	if err := pools.Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not found", func() bool { _, e := sink.counts(); return e > 1 }, nil)
}

func TestParseInferencePool(t *testing.T) {
	tests := []struct {
		name    string
		pool    *unstructured.Unstructured
		sel     string
		ports   []int
		wantErr string
	}{
		{"ok", inferencePool("p", map[string]any{"app": "vllm", "tier": "a"}, 8000, 8001), "app=vllm,tier=a", []int{8000, 8001}, ""},
		{"no selector", inferencePool("p", map[string]any{}, 8000), "", nil, "matchLabels is empty"},
		{"no ports", inferencePool("p", map[string]any{"app": "vllm"}), "", nil, "spec.targetPorts"},
		{"bad port", inferencePool("p", map[string]any{"app": "vllm"}, 70000), "", nil, "spec.targetPorts[0].number"},
		{"bad label", inferencePool("p", map[string]any{"app": "not valid!"}, 8000), "", nil, "matchLabels"},
	}
	for _, tt := range tests {
		sel, ports, err := ParseInferencePool(tt.pool)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if sel.String() != tt.sel || len(ports) != len(tt.ports) || ports[0] != tt.ports[0] {
			t.Errorf("%s: got %q %v, want %q %v", tt.name, sel, ports, tt.sel, tt.ports)
		}
	}
}

// TestFleetWithPods runs the whole fleet on pod discovery: a readiness flip
// reaches the published snapshot.
func TestFleetWithPods(t *testing.T) {
	s := newModelServer(t, []byte("vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n"))
	host, port, _ := strings.Cut(s.addr(), ":")
	vllm := map[string]string{"app": "vllm"}
	kc := fake.NewClientset(pod("a", host, true, vllm, nil))
	var f *Fleet
	var err error
	cfg := DefaultConfig()
	cfg.Endpoints = EndpointsConfig{Mode: ModePods, Namespace: ns, Selector: "app=vllm", Resync: time.Minute}
	if cfg.Endpoints.TargetPort, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	f, err = New(cfg, Deps{Kube: kc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "fresh endpoint", func() bool {
		e := f.Load().Lookup(s.addr())
		return e != nil && e.State == scheduler.StateFresh && e.Running == 2
	}, nil)
	if _, err := kc.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod("a", host, false, vllm, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "endpoint gone", func() bool { return len(f.Load().Endpoints) == 0 }, nil)
}
