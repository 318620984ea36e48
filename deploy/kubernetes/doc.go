// Package kubernetes holds trimtab's Kubernetes manifests (apply them with
// `kubectl apply -k deploy/kubernetes`) and the test that keeps them valid:
// every manifest decodes strictly with client-go's scheme (a misspelt field
// fails), the InferencePool and HTTPRoute are checked field by field, the
// cross-references between objects resolve, and the profile in the
// ConfigMap parses with trimtab's own schema. The package has no code.
package kubernetes
