//go:build tools

// Package deps pins the modules the packages under construction use, so
// go.sum is complete while they land in parallel. Removed once every
// dependency is imported by real code.
package deps

import (
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/prometheus/common/model"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "go.yaml.in/yaml/v3"
	_ "gonum.org/v1/gonum/stat"
	_ "gonum.org/v1/plot"
	_ "gonum.org/v1/plot/plotter"
	_ "gonum.org/v1/plot/vg"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/health/grpc_health_v1"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/discovery/v1"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/api/rbac/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/dynamic/dynamicinformer"
	_ "k8s.io/client-go/dynamic/fake"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/rest"
	_ "k8s.io/utils/clock"
	_ "k8s.io/utils/clock/testing"
)
