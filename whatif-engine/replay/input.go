// Package replay replays a trace of jobs through Kueue's own scheduler, queue manager, cache and workload
// controller, over an in-memory API, on whatever clock the caller runs it under. Inside a testing/synctest
// bubble that clock is virtual: it jumps to the next timer as soon as every goroutine is blocked, so a replay
// takes as long as Kueue's decisions take to compute, not as long as the trace lasts.
package replay

import (
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuev1beta1 "sigs.k8s.io/kueue/apis/kueue/v1beta1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Job is one job of the trace: the batch Job a user would submit, when, and how long its pods run once started.
type Job struct {
	Name     string          `json:"name"`     // the trace's name for it: events name it so
	Submit   float64         `json:"submit"`   // seconds from the trace's start
	Duration float64         `json:"duration"` // seconds its pods run once admitted
	Manifest json.RawMessage `json:"manifest"` // a batch/v1 Job
}

// Input is everything a replay reads besides Kueue's Configuration.
type Input struct {
	// Objects: what `konduktor-install render` produces for the config (Namespaces, WorkloadPriorityClasses,
	// Topologies, ResourceFlavors, Cohorts, ClusterQueues, LocalQueues); other kinds are ignored.
	Objects []json.RawMessage `json:"objects"`
	Nodes   []json.RawMessage `json:"nodes"` // the config's nodes, as the simulated cluster makes them
	// CRDs: Kueue's CustomResourceDefinitions at the pinned version, for their structural schemas.
	CRDs    []apiextensionsv1.CustomResourceDefinition `json:"crds"`
	Jobs    []Job                                      `json:"jobs"` // in trace order: submit time, then the trace's own order
	Horizon float64                                    `json:"horizon"`
}

// Event is something that happened to a job, at a trace time in seconds.
type Event struct {
	Time   float64 `json:"time"`
	Job    string  `json:"job"`
	Kind   string  `json:"kind"`             // submitted, pending, admitted, evicted, finished
	Detail string  `json:"detail,omitempty"` // pending: Kueue's message; evicted: the Evicted condition's reason
}

// Scheme is Kueue's scheme, as its main builds it: the built-in kinds, Kueue's APIs and its Configuration.
func Scheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kueue.AddToScheme(scheme))
	utilruntime.Must(kueuev1beta1.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
	return scheme
}

// ReadInput decodes the replay's input document.
func ReadInput(r io.Reader) (*Input, error) {
	var in Input
	decoder := json.NewDecoder(r)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&in); err != nil {
		return nil, fmt.Errorf("reading the replay input: %w", err)
	}
	return &in, nil
}

// decoded is the input's objects as typed Kubernetes objects, in the order Kueue needs them.
type decoded struct {
	namespaces []*corev1.Namespace
	priorities []*kueue.WorkloadPriorityClass
	topologies []*kueue.Topology
	flavors    []*kueue.ResourceFlavor
	cohorts    []*kueue.Cohort
	queues     []*kueue.ClusterQueue
	local      []*kueue.LocalQueue
	nodes      []*corev1.Node
}

func decode(scheme *runtime.Scheme, in *Input) (*decoded, error) {
	deserializer := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	result := &decoded{}
	read := func(raw json.RawMessage) (client.Object, error) {
		obj, gvk, err := deserializer.Decode(raw, nil, nil)
		if err != nil {
			if runtime.IsNotRegisteredError(err) {
				return nil, nil // a kind Kueue does not read (RoleBindings, Roles, ...)
			}
			return nil, fmt.Errorf("decoding an object: %w", err)
		}
		if gvk.Group == kueue.SchemeGroupVersion.Group && gvk.Version != kueue.SchemeGroupVersion.Version {
			converted, err := scheme.ConvertToVersion(obj, kueue.SchemeGroupVersion)
			if err != nil {
				return nil, fmt.Errorf("converting %s to %s: %w", gvk, kueue.SchemeGroupVersion, err)
			}
			obj = converted
		}
		typed, ok := obj.(client.Object)
		if !ok {
			return nil, nil
		}
		return typed, nil
	}
	for _, raw := range in.Objects {
		obj, err := read(raw)
		if err != nil {
			return nil, err
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			result.namespaces = append(result.namespaces, o)
		case *kueue.WorkloadPriorityClass:
			result.priorities = append(result.priorities, o)
		case *kueue.Topology:
			result.topologies = append(result.topologies, o)
		case *kueue.ResourceFlavor:
			result.flavors = append(result.flavors, o)
		case *kueue.Cohort:
			result.cohorts = append(result.cohorts, o)
		case *kueue.ClusterQueue:
			result.queues = append(result.queues, o)
		case *kueue.LocalQueue:
			result.local = append(result.local, o)
		}
	}
	for _, raw := range in.Nodes {
		obj, err := read(raw)
		if err != nil {
			return nil, err
		}
		node, ok := obj.(*corev1.Node)
		if !ok {
			return nil, fmt.Errorf("nodes: an object that is not a v1 Node")
		}
		result.nodes = append(result.nodes, node)
	}
	return result, nil
}
