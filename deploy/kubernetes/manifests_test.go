package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/trimtab/trimtab/configs"
	"github.com/trimtab/trimtab/fleet"
)

// crdGroups are the API groups whose kinds client-go's scheme does not
// know; their objects are checked field by field as unstructured.
var crdGroups = map[string]bool{
	"inference.networking.k8s.io": true,
	"gateway.networking.k8s.io":   true,
}

// strict decodes built-in kinds rejecting unknown and duplicate fields.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// object is one YAML document of a manifest file.
type object struct {
	file string
	doc  int
	raw  []byte
	u    *unstructured.Unstructured
	obj  runtime.Object // nil for CRD kinds
}

func (o object) String() string {
	return fmt.Sprintf("%s#%d %s/%s", o.file, o.doc, o.u.GetKind(), o.u.GetName())
}

// splitDocs returns the non-empty YAML documents of data.
func splitDocs(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := sigsyaml.Unmarshal(d, &m); err != nil {
			return nil, err
		}
		if len(m) > 0 {
			docs = append(docs, d)
		}
	}
}

// toUnstructured reads a document with integers kept as int64, as the API
// server would.
func toUnstructured(doc []byte) (*unstructured.Unstructured, error) {
	j, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// decode turns one document into an object: strictly typed for built-in
// kinds, unstructured for CRD kinds.
func decode(file string, i int, doc []byte) (object, error) {
	u, err := toUnstructured(doc)
	if err != nil {
		return object{}, err
	}
	o := object{file: file, doc: i, raw: doc, u: u}
	gv, err := runtimeGroup(u.GetAPIVersion())
	if err != nil {
		return o, err
	}
	if u.GetKind() == "" || u.GetName() == "" {
		return o, fmt.Errorf("apiVersion %q kind %q name %q: kind and metadata.name are required", u.GetAPIVersion(), u.GetKind(), u.GetName())
	}
	if crdGroups[gv] {
		return o, nil
	}
	obj, _, err := strict.Decode(doc, nil, nil)
	if err != nil {
		return o, err
	}
	o.obj = obj
	return o, nil
}

func runtimeGroup(apiVersion string) (string, error) {
	if apiVersion == "" {
		return "", errors.New("apiVersion is required")
	}
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i], nil
	}
	return "", nil // core
}

// load decodes every manifest in the directory (kustomization.yaml aside).
func load(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var objs []object
	for _, f := range files {
		if f == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitDocs(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
		for i, d := range docs {
			o, err := decode(f, i, d)
			if err != nil {
				t.Errorf("%s#%d: %v", f, i, err)
				continue
			}
			objs = append(objs, o)
		}
	}
	if len(objs) < 6 {
		t.Fatalf("decoded %d objects, want at least ServiceAccount, ConfigMap, StatefulSet, Service, InferencePool, HTTPRoute", len(objs))
	}
	return objs
}

func find[T runtime.Object](objs []object, name string) (T, bool) {
	for _, o := range objs {
		if v, ok := o.obj.(T); ok && o.u.GetName() == name {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func all[T runtime.Object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func crds(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.obj == nil && o.u.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// TestManifestsDecode: every document decodes (strictly, for built-in
// kinds) and names are unique per kind.
func TestManifestsDecode(t *testing.T) {
	seen := map[string]string{}
	for _, o := range load(t) {
		key := o.u.GetKind() + "/" + o.u.GetName()
		if prev, dup := seen[key]; dup {
			t.Errorf("%s: %s is also defined in %s", o, key, prev)
		}
		seen[key] = o.file
		if o.u.GetNamespace() != "" {
			t.Errorf("%s: namespace %q hard-coded; leave it to kubectl -n or kustomize", o, o.u.GetNamespace())
		}
	}
}

// TestStrictDecodingRejectsTypos shows the decoding above can fail: a
// misspelt field, a duplicated field and a wrong type are all errors, and
// so is a typo in a CRD kind's spec.
func TestStrictDecodingRejectsTypos(t *testing.T) {
	dep, err := os.ReadFile("statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := os.ReadFile("inferencepool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	route, err := os.ReadFile("httproute.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file string
		data       []byte
		old, new   string
	}{
		{"misspelt field", "statefulset.yaml", dep, "  replicas: 3\n", "  replicaz: 3\n"},
		{"duplicate field", "statefulset.yaml", dep, "  replicas: 3\n", "  replicas: 3\n  replicas: 2\n"},
		{"wrong type", "statefulset.yaml", dep, "  replicas: 3\n", "  replicas: one\n"},
		{"misspelt probe field", "statefulset.yaml", dep, "periodSeconds: 10", "periodSecond: 10"},
		{"misspelt CRD field", "inferencepool.yaml", pool, "endpointPickerRef:", "endpointPickerReff:"},
		{"bad failure mode", "inferencepool.yaml", pool, "failureMode: FailClose", "failureMode: FailSafe"},
		{"port out of range", "inferencepool.yaml", pool, "- number: 8000", "- number: 80000"},
		{"route to a missing pool", "httproute.yaml", route, "name: vllm-llama3-8b-instruct", "name: vllm-llama3-70b"},
	}
	objs := load(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(tt.data, []byte(tt.old)) {
				t.Fatalf("%s no longer contains %q; update the test", tt.file, tt.old)
			}
			mutated := bytes.Replace(tt.data, []byte(tt.old), []byte(tt.new), 1)
			docs, err := splitDocs(mutated)
			if err != nil {
				return // broken YAML is an error too
			}
			var errs []error
			for i, d := range docs {
				o, err := decode(tt.file, i, d)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				errs = append(errs, checkCRD(o, objs)...)
			}
			if len(errs) == 0 {
				t.Errorf("%s with %q → %q decoded without error", tt.file, tt.old, tt.new)
			}
		})
	}
}

// checkCRD checks an InferencePool or HTTPRoute field by field; other
// objects pass.
func checkCRD(o object, objs []object) []error {
	switch o.u.GetKind() {
	case "InferencePool":
		return checkInferencePool(o, objs)
	case "HTTPRoute":
		return checkHTTPRoute(o, objs)
	}
	return nil
}

func keys(where string, m map[string]any, allowed ...string) []error {
	var errs []error
	for k := range m {
		if !slices.Contains(allowed, k) {
			errs = append(errs, fmt.Errorf("%s: unknown field %q (known: %s)", where, k, strings.Join(allowed, ", ")))
		}
	}
	return errs
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func portNumber(v any) (int64, bool) {
	n, ok := v.(int64)
	return n, ok && n >= 1 && n <= 65535
}

// checkInferencePool checks an inference.networking.k8s.io/v1
// InferencePool against the v1 schema (selector.matchLabels,
// targetPorts[].number, appProtocol, endpointPickerRef{group, kind, name,
// port.number, failureMode}) and that its picker is a Service of these
// manifests, on the port that reaches trimtab's ext-proc container port.
func checkInferencePool(o object, objs []object) []error {
	m := o.u.Object
	errs := keys(o.String(), m, "apiVersion", "kind", "metadata", "spec")
	if o.u.GetAPIVersion() != "inference.networking.k8s.io/v1" {
		errs = append(errs, fmt.Errorf("%s: apiVersion %q, want inference.networking.k8s.io/v1", o, o.u.GetAPIVersion()))
	}
	spec := asMap(m["spec"])
	errs = append(errs, keys(o.String()+" spec", spec, "selector", "targetPorts", "appProtocol", "endpointPickerRef")...)
	sel := asMap(spec["selector"])
	errs = append(errs, keys(o.String()+" spec.selector", sel, "matchLabels")...)
	if ml := asMap(sel["matchLabels"]); len(ml) == 0 {
		errs = append(errs, fmt.Errorf("%s: spec.selector.matchLabels is required", o))
	}
	tps := asSlice(spec["targetPorts"])
	if len(tps) == 0 || len(tps) > 8 {
		errs = append(errs, fmt.Errorf("%s: spec.targetPorts has %d entries, want 1…8", o, len(tps)))
	}
	for i, p := range tps {
		pm := asMap(p)
		errs = append(errs, keys(fmt.Sprintf("%s spec.targetPorts[%d]", o, i), pm, "number")...)
		if _, ok := portNumber(pm["number"]); !ok {
			errs = append(errs, fmt.Errorf("%s: spec.targetPorts[%d].number %v, want 1…65535", o, i, pm["number"]))
		}
	}
	if ap, ok := spec["appProtocol"]; ok && ap != "http" && ap != "kubernetes.io/h2c" {
		errs = append(errs, fmt.Errorf("%s: spec.appProtocol %v, want http or kubernetes.io/h2c", o, ap))
	}
	ref := asMap(spec["endpointPickerRef"])
	if ref == nil {
		return append(errs, fmt.Errorf("%s: spec.endpointPickerRef is required", o))
	}
	errs = append(errs, keys(o.String()+" spec.endpointPickerRef", ref, "group", "kind", "name", "port", "failureMode")...)
	if g, ok := ref["group"]; ok && g != "" {
		errs = append(errs, fmt.Errorf("%s: endpointPickerRef.group %v, want \"\" (core: a Service)", o, g))
	}
	if k, ok := ref["kind"]; ok && k != "Service" {
		errs = append(errs, fmt.Errorf("%s: endpointPickerRef.kind %v, want Service", o, k))
	}
	if fm, ok := ref["failureMode"]; ok && fm != "FailOpen" && fm != "FailClose" {
		errs = append(errs, fmt.Errorf("%s: endpointPickerRef.failureMode %v, want FailOpen or FailClose", o, fm))
	}
	port := asMap(ref["port"])
	errs = append(errs, keys(o.String()+" spec.endpointPickerRef.port", port, "number")...)
	num, ok := portNumber(port["number"])
	if !ok {
		return append(errs, fmt.Errorf("%s: endpointPickerRef.port.number %v is required for a Service, 1…65535", o, port["number"]))
	}
	name, _ := ref["name"].(string)
	svc, found := find[*corev1.Service](objs, name)
	if !found {
		return append(errs, fmt.Errorf("%s: endpointPickerRef.name %q is not a Service in these manifests", o, name))
	}
	var target string
	for _, p := range svc.Spec.Ports {
		if int64(p.Port) == num {
			target = p.TargetPort.String()
		}
	}
	if target != "ext-proc" && target != "9002" {
		errs = append(errs, fmt.Errorf("%s: Service %s port %d targets %q, want trimtab's ext-proc port", o, name, num, target))
	}
	return errs
}

// checkHTTPRoute checks a gateway.networking.k8s.io/v1 HTTPRoute's shape
// and that each InferencePool backendRef names a pool of these manifests.
func checkHTTPRoute(o object, objs []object) []error {
	m := o.u.Object
	errs := keys(o.String(), m, "apiVersion", "kind", "metadata", "spec")
	if o.u.GetAPIVersion() != "gateway.networking.k8s.io/v1" {
		errs = append(errs, fmt.Errorf("%s: apiVersion %q, want gateway.networking.k8s.io/v1", o, o.u.GetAPIVersion()))
	}
	spec := asMap(m["spec"])
	errs = append(errs, keys(o.String()+" spec", spec, "parentRefs", "hostnames", "rules")...)
	parents := asSlice(spec["parentRefs"])
	if len(parents) == 0 {
		errs = append(errs, fmt.Errorf("%s: spec.parentRefs is empty: the route attaches to no Gateway", o))
	}
	for i, p := range parents {
		pm := asMap(p)
		errs = append(errs, keys(fmt.Sprintf("%s parentRefs[%d]", o, i), pm, "group", "kind", "namespace", "name", "sectionName", "port")...)
		if pm["name"] == nil {
			errs = append(errs, fmt.Errorf("%s: parentRefs[%d].name is required", o, i))
		}
	}
	pools := map[string]bool{}
	for _, p := range crds(objs, "InferencePool") {
		pools[p.u.GetName()] = true
	}
	rules := asSlice(spec["rules"])
	if len(rules) == 0 {
		errs = append(errs, fmt.Errorf("%s: spec.rules is empty", o))
	}
	poolRefs := 0
	for i, r := range rules {
		rm := asMap(r)
		where := fmt.Sprintf("%s rules[%d]", o, i)
		errs = append(errs, keys(where, rm, "name", "matches", "filters", "backendRefs", "timeouts", "retry", "sessionPersistence")...)
		for j, mt := range asSlice(rm["matches"]) {
			errs = append(errs, keys(fmt.Sprintf("%s.matches[%d]", where, j), asMap(mt), "path", "headers", "queryParams", "method")...)
			if p := asMap(asMap(mt)["path"]); p != nil {
				errs = append(errs, keys(fmt.Sprintf("%s.matches[%d].path", where, j), p, "type", "value")...)
				if t := p["type"]; t != "Exact" && t != "PathPrefix" && t != "RegularExpression" {
					errs = append(errs, fmt.Errorf("%s.matches[%d].path.type %v", where, j, t))
				}
			}
		}
		if to := asMap(rm["timeouts"]); to != nil {
			errs = append(errs, keys(where+".timeouts", to, "request", "backendRequest")...)
		}
		for j, b := range asSlice(rm["backendRefs"]) {
			bm := asMap(b)
			errs = append(errs, keys(fmt.Sprintf("%s.backendRefs[%d]", where, j), bm, "group", "kind", "name", "namespace", "port", "weight", "filters")...)
			if bm["kind"] != "InferencePool" {
				continue
			}
			poolRefs++
			if bm["group"] != "inference.networking.k8s.io" {
				errs = append(errs, fmt.Errorf("%s.backendRefs[%d].group %v, want inference.networking.k8s.io", where, j, bm["group"]))
			}
			if n, _ := bm["name"].(string); !pools[n] {
				errs = append(errs, fmt.Errorf("%s.backendRefs[%d]: InferencePool %q is not in these manifests", where, j, n))
			}
		}
	}
	if poolRefs == 0 {
		errs = append(errs, fmt.Errorf("%s: no backendRef to an InferencePool", o))
	}
	return errs
}

func TestCustomResources(t *testing.T) {
	objs := load(t)
	for _, kind := range []string{"InferencePool", "HTTPRoute"} {
		list := crds(objs, kind)
		if len(list) == 0 {
			t.Errorf("no %s in the manifests", kind)
		}
		for _, o := range list {
			for _, err := range checkCRD(o, objs) {
				t.Error(err)
			}
		}
	}
}

// TestStatefulSet checks what the StatefulSet promises: the three ports,
// probes on the admin port, resources, a non-root read-only container,
// `serve --config` on a file that the ConfigMap volume provides, and an
// existing ServiceAccount; and that the Service selects its pods and
// targets its ports.
func TestStatefulSet(t *testing.T) {
	objs := load(t)
	dep, ok := find[*appsv1.StatefulSet](objs, "trimtab")
	if !ok {
		t.Fatal("no StatefulSet trimtab")
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	// settings.DefaultConfig: http :8080, ext_proc :9002, admin :9090.
	for name, want := range map[string]int32{"http": 8080, "ext-proc": 9002, "admin": 9090} {
		if ports[name] != want {
			t.Errorf("container port %s = %d, want %d", name, ports[name], want)
		}
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET of %s", pr.name, pr.path)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port.String() != "admin" {
			t.Errorf("%s probe: GET %s on %s, want %s on admin", pr.name, pr.probe.HTTPGet.Path, pr.probe.HTTPGet.Port.String(), pr.path)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; r == corev1.ResourceMemory && !ok {
			t.Errorf("no %s limit", r)
		}
	}
	nonRoot := pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
	if sc := c.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
		nonRoot = *sc.RunAsNonRoot
	}
	if !nonRoot {
		t.Error("runAsNonRoot is not set")
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("container securityContext: want allowPrivilegeEscalation false, readOnlyRootFilesystem true, capabilities drop ALL")
	}

	// serve --config PATH, PATH provided by a ConfigMap volume.
	args := append(append([]string{}, c.Command...), c.Args...)
	i := slices.Index(args, "--config")
	if !slices.Contains(args, "serve") || i < 0 || i+1 >= len(args) {
		t.Fatalf("args %q, want serve --config FILE", args)
	}
	cfgPath := args[i+1]
	var cmName string
	for _, m := range c.VolumeMounts {
		if filepath.Dir(cfgPath) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cmName = v.ConfigMap.Name
			}
		}
	}
	cm, ok := find[*corev1.ConfigMap](objs, cmName)
	if !ok {
		t.Fatalf("--config %s: no ConfigMap volume mounted at %s", cfgPath, filepath.Dir(cfgPath))
	}
	if _, ok := cm.Data[filepath.Base(cfgPath)]; !ok {
		t.Errorf("ConfigMap %s has no key %s", cmName, filepath.Base(cfgPath))
	}
	if _, ok := find[*corev1.ServiceAccount](objs, pod.ServiceAccountName); !ok || pod.ServiceAccountName == "" {
		t.Errorf("serviceAccountName %q is not a ServiceAccount in these manifests", pod.ServiceAccountName)
	}
	// Draining SSE streams takes up to server.drain_timeout (30 s).
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want > 30 (the proxy's drain timeout)", g)
	}

	svc, ok := find[*corev1.Service](objs, "trimtab")
	if !ok {
		t.Fatal("no Service trimtab")
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not select the StatefulSet's pods %v", svc.Spec.Selector, podLabels)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
	if !sel.Matches(podLabels) {
		t.Errorf("StatefulSet selector %v does not match its template labels %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	for _, p := range svc.Spec.Ports {
		tp := p.TargetPort.String()
		if _, named := ports[tp]; !named {
			t.Errorf("Service port %s targets %q, not a named container port", p.Name, tp)
		} else if ports[tp] != p.Port {
			t.Errorf("Service port %s is %d but its container port %s is %d", p.Name, p.Port, tp, ports[tp])
		}
	}
}

// TestKustomization: every resource it lists exists, and every manifest in
// the directory is listed — except the RBAC files of the other discovery
// modes, which are alternatives.
func TestKustomization(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := sigsyaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, err := range keys("kustomization.yaml", k, "apiVersion", "kind", "labels", "resources", "namespace", "images", "configMapGenerator", "secretGenerator", "patches") {
		t.Error(err)
	}
	if k["apiVersion"] != "kustomize.config.k8s.io/v1beta1" || k["kind"] != "Kustomization" {
		t.Errorf("apiVersion %v kind %v, want kustomize.config.k8s.io/v1beta1 Kustomization", k["apiVersion"], k["kind"])
	}
	var listed []string
	for _, r := range asSlice(k["resources"]) {
		s, _ := r.(string)
		listed = append(listed, s)
		if _, err := os.Stat(s); err != nil {
			t.Errorf("resource %s: %v", s, err)
		}
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if f == "kustomization.yaml" || strings.HasPrefix(f, "rbac-") {
			continue
		}
		if !slices.Contains(listed, f) {
			t.Errorf("%s is not listed in kustomization.yaml resources", f)
		}
	}
	if !slices.ContainsFunc(listed, func(s string) bool { return strings.HasPrefix(s, "rbac-") }) {
		t.Error("no rbac-*.yaml in the resources: discovery would be forbidden")
	}
}

// profile returns the profile in the trimtab-profile ConfigMap.
func profile(t *testing.T, objs []object) []byte {
	t.Helper()
	cm, ok := find[*corev1.ConfigMap](objs, "trimtab-profile")
	if !ok {
		t.Fatal("no ConfigMap trimtab-profile")
	}
	p, ok := cm.Data["profile.yaml"]
	if !ok {
		t.Fatal("ConfigMap trimtab-profile has no profile.yaml")
	}
	return []byte(p)
}

// TestProfile parses the ConfigMap's profile with trimtab's own schema
// (configs.Parse: every section strictly, every value validated) and checks
// it is the adaptive, pods-discovery profile the manifests are built
// around, finding the InferencePool's pods on its port.
func TestProfile(t *testing.T) {
	objs := load(t)
	f, err := configs.Parse(profile(t, objs))
	if err != nil {
		t.Fatalf("ConfigMap trimtab-profile, profile.yaml: %v", err)
	}
	if !f.Adaptive.Enabled {
		t.Error("adaptive.enabled is false; the example runs adaptive mode")
	}
	if !f.HasEndpoints || f.Fleet.Endpoints.Mode != fleet.ModePods {
		t.Fatalf("endpoints.mode %q, want pods (serve needs an endpoints: section)", f.Fleet.Endpoints.Mode)
	}
	// The adaptive profile's scorers and weights (configs/adaptive.yaml).
	def, err := configs.LoadShipped("adaptive")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Scorers) != len(def.Scorers) {
		t.Fatalf("%d scorers, configs/adaptive.yaml has %d", len(f.Scorers), len(def.Scorers))
	}
	for i, sc := range f.Scorers {
		if sc.Type != def.Scorers[i].Type || *sc.Weight != *def.Scorers[i].Weight {
			t.Errorf("scorers[%d] = %s %v, configs/adaptive.yaml has %s %v", i, sc.Type, *sc.Weight, def.Scorers[i].Type, *def.Scorers[i].Weight)
		}
		if sc.Name != def.Scorers[i].Name {
			t.Errorf("scorers[%d] is named %q, configs/adaptive.yaml's %q", i, sc.Name, def.Scorers[i].Name)
		}
		// Every param the shipped profile sets (the ConfigMap may spell
		// out more, at their defaults).
		for k, v := range def.Scorers[i].Params {
			if fmt.Sprint(sc.Params[k]) != fmt.Sprint(v) {
				t.Errorf("scorers[%d] (%s) %s: %v, configs/adaptive.yaml has %v", i, sc.Type, k, sc.Params[k], v)
			}
		}
	}
	// Everything else that routes: the whole adaptive section (trade,
	// fill, detector, dwell …), the scheduler (its guard, wait bound and
	// join bound; the seed is the deployment's), the picker and filters.
	if !reflect.DeepEqual(f.Adaptive, def.Adaptive) {
		t.Errorf("adaptive %+v; configs/adaptive.yaml has %+v", f.Adaptive, def.Adaptive)
	}
	fs, ds := f.Scheduler, def.Scheduler
	fs.Seed, ds.Seed = 0, 0
	if !reflect.DeepEqual(fs, ds) {
		t.Errorf("scheduler %+v; configs/adaptive.yaml has %+v", fs, ds)
	}
	if !reflect.DeepEqual(f.Picker, def.Picker) || !slices.Equal(f.Filters, def.Filters) {
		t.Errorf("picker %+v, filters %v; configs/adaptive.yaml has %+v, %v", f.Picker, f.Filters, def.Picker, def.Filters)
	}
	ep := f.Fleet.Endpoints
	pools := crds(objs, "InferencePool")
	if len(pools) == 0 {
		t.Fatal("no InferencePool")
	}
	for _, p := range pools {
		ml, _, _ := unstructured.NestedStringMap(p.u.Object, "spec", "selector", "matchLabels")
		sel, err := labels.Parse(ep.Selector)
		if err != nil || !sel.Matches(labels.Set(ml)) {
			t.Errorf("endpoints.selector %q does not select the pods of InferencePool %s (%v)", ep.Selector, p.u.GetName(), ml)
		}
		tps, _, _ := unstructured.NestedSlice(p.u.Object, "spec", "targetPorts")
		if len(tps) == 0 || asMap(tps[0])["number"] != int64(ep.TargetPort) {
			t.Errorf("endpoints.target_port %d, InferencePool %s serves on %v", ep.TargetPort, p.u.GetName(), tps)
		}
	}
}

// TestRBACForDiscoveryMode: the RBAC the kustomization applies lets the
// ServiceAccount do what the profile's discovery mode needs (pods mode:
// get, list and watch pods).
func TestRBACForDiscoveryMode(t *testing.T) {
	objs := load(t)
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := sigsyaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	applied := map[string]bool{}
	for _, r := range k.Resources {
		applied[r] = true
	}
	rules := map[string][]rbacv1.PolicyRule{} // "Role/name" → rules
	for _, o := range objs {
		if !applied[o.file] {
			continue
		}
		switch r := o.obj.(type) {
		case *rbacv1.Role:
			rules["Role/"+r.Name] = r.Rules
		case *rbacv1.ClusterRole:
			rules["ClusterRole/"+r.Name] = r.Rules
		}
	}
	f, err := configs.Parse(profile(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	var granted []rbacv1.PolicyRule
	bind := func(subjects []rbacv1.Subject, ref rbacv1.RoleRef, namespaced bool) {
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Name != "trimtab" {
				continue
			}
			granted = append(granted, rules[ref.Kind+"/"+ref.Name]...)
			// A namespaced Role grants only its own namespace, where the
			// ServiceAccount (and so trimtab) lives: discovery must look there.
			if namespaced && s.Namespace != "" && s.Namespace != f.Fleet.Endpoints.Namespace {
				t.Errorf("RoleBinding for ServiceAccount trimtab in namespace %q, but endpoints.namespace is %q", s.Namespace, f.Fleet.Endpoints.Namespace)
			}
		}
	}
	for _, o := range objs {
		if !applied[o.file] {
			continue
		}
		switch b := o.obj.(type) {
		case *rbacv1.RoleBinding:
			bind(b.Subjects, b.RoleRef, true)
		case *rbacv1.ClusterRoleBinding:
			bind(b.Subjects, b.RoleRef, false)
		}
	}
	allows := func(resource, verb string) bool {
		for _, r := range granted {
			if (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
				(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
				(slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) {
				return true
			}
		}
		return false
	}
	for _, verb := range []string{"list", "watch"} {
		if !allows("pods", verb) {
			t.Errorf("the applied RBAC does not let ServiceAccount trimtab %s pods (endpoints.mode: pods)", verb)
		}
	}
}

// TestProfileServersListenOnThePodPorts: each server of the ConfigMap's
// profile listens on every interface of the pod on its container port, so
// kubelet probes and Prometheus reach the admin server and the Service
// reaches the others. The admin server's default is loopback only
// (settings.DefaultConfig), so the profile must say ":9090".
func TestProfileServersListenOnThePodPorts(t *testing.T) {
	objs := load(t)
	f, err := configs.Parse(profile(t, objs))
	if err != nil {
		t.Fatalf("ConfigMap trimtab-profile, profile.yaml: %v", err)
	}
	srv := f.Server
	dep, ok := find[*appsv1.StatefulSet](objs, "trimtab")
	if !ok {
		t.Fatal("no StatefulSet trimtab")
	}
	ports := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, s := range []struct{ port, key, addr string }{
		{"http", "server.http.addr", srv.HTTP.Addr},
		{"ext-proc", "server.ext_proc.addr", srv.ExtProc.Addr},
		{"admin", "server.admin.addr", srv.Admin.Addr},
	} {
		host, port, err := net.SplitHostPort(s.addr)
		if err != nil {
			t.Errorf("%s %q: %v", s.key, s.addr, err)
			continue
		}
		if want := fmt.Sprint(ports[s.port]); port != want || (host != "" && host != "0.0.0.0" && host != "::") {
			t.Errorf("%s %q: want \":%s\" (every interface, container port %s)", s.key, s.addr, want, s.port)
		}
	}
}

// TestReplicaSync: the StatefulSet's replicas sync with each other: the
// profile lists exactly their stable names (pod N of the StatefulSet
// behind its headless Service) on the sync port, which the container
// exposes and the Service publishes, not-ready pods included.
func TestReplicaSync(t *testing.T) {
	objs := load(t)
	f, err := configs.Parse(profile(t, objs))
	if err != nil {
		t.Fatalf("ConfigMap trimtab-profile, profile.yaml: %v", err)
	}
	r := f.Replicas
	sts, ok := find[*appsv1.StatefulSet](objs, "trimtab")
	if !ok {
		t.Fatal("no StatefulSet trimtab")
	}
	if !r.Enabled {
		t.Fatal("replicas.enabled is false; the example runs three synced replicas")
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet replicas %v, want 3", sts.Spec.Replicas)
	}
	ports := map[string]int32{}
	for _, p := range sts.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	_, listenPort, err := net.SplitHostPort(r.Listen)
	if err != nil || listenPort != fmt.Sprint(ports["sync"]) {
		t.Errorf("replicas.listen %q, want the container port sync (%d)", r.Listen, ports["sync"])
	}
	hs, ok := find[*corev1.Service](objs, sts.Spec.ServiceName)
	if !ok {
		t.Fatalf("serviceName %q is not a Service in these manifests", sts.Spec.ServiceName)
	}
	if hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service publishing not-ready pods", hs.Name, hs.Spec.ClusterIP, hs.Spec.PublishNotReadyAddresses)
	}
	if !labels.SelectorFromSet(hs.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("Service %s does not select the StatefulSet's pods", hs.Name)
	}
	var want []string
	for i := range int(*sts.Spec.Replicas) {
		want = append(want, fmt.Sprintf("%s-%d.%s:%d", sts.Name, i, hs.Name, ports["sync"]))
	}
	if !slices.Equal(r.Peers, want) {
		t.Errorf("replicas.peers %v, want every replica's stable name %v", r.Peers, want)
	}
	found := false
	for _, p := range hs.Spec.Ports {
		if p.TargetPort.String() == "sync" && p.Port == ports["sync"] {
			found = true
		}
	}
	if !found {
		t.Errorf("Service %s does not publish the sync port", hs.Name)
	}
}

// TestReplicaSyncAuthenticated: the replicas authenticate each other with
// a token from a Secret that the kustomization generates, mounted where
// the profile's replicas.token_file reads it, and the profile does not
// switch authentication off.
func TestReplicaSyncAuthenticated(t *testing.T) {
	objs := load(t)
	f, err := configs.Parse(profile(t, objs))
	if err != nil {
		t.Fatalf("ConfigMap trimtab-profile, profile.yaml: %v", err)
	}
	r := f.Replicas
	if r.Insecure || r.TokenFile == "" {
		t.Fatalf("replicas.insecure %v, token_file %q: want sync authenticated by a token file", r.Insecure, r.TokenFile)
	}
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		SecretGenerator []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
		} `json:"secretGenerator"`
	}
	if err := sigsyaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	generated := map[string][]string{} // Secret → keys
	for _, g := range k.SecretGenerator {
		for _, f := range g.Files {
			key, _, _ := strings.Cut(f, "=")
			generated[g.Name] = append(generated[g.Name], key)
		}
	}
	sts, ok := find[*appsv1.StatefulSet](objs, "trimtab")
	if !ok {
		t.Fatal("no StatefulSet trimtab")
	}
	pod := sts.Spec.Template.Spec
	mounted := false
	for _, m := range pod.Containers[0].VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Dir(r.TokenFile) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if !slices.Contains(generated[v.Secret.SecretName], filepath.Base(r.TokenFile)) {
				t.Errorf("volume %s mounts Secret %s, which kustomization.yaml does not generate with key %s", v.Name, v.Secret.SecretName, filepath.Base(r.TokenFile))
			}
			if v.Secret.Optional != nil && *v.Secret.Optional {
				t.Errorf("Secret volume %s is optional: a pod without the token would not start sync", v.Name)
			}
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("replicas.token_file %s: no Secret volume mounted at %s", r.TokenFile, filepath.Dir(r.TokenFile))
	}
	ignore, err := os.ReadFile(".gitignore")
	if err != nil || !strings.Contains(string(ignore), "replica-token") {
		t.Errorf(".gitignore does not keep replica-token (the generated Secret's file) out of version control: %v", err)
	}
}
