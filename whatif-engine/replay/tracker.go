package replay

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// fieldManagedTracker stores the in-memory API's objects and keeps their managedFields on every write, as the
// API server does: server-side apply merges by the schema and drops what a field manager stops setting. It is
// what client-go's field-managed test tracker does, with the REST mapping and one field manager per kind made
// once rather than on every write (a replay writes Workload status tens of thousands of times).
type fieldManagedTracker struct {
	testing.ObjectTracker
	scheme    *runtime.Scheme
	mapper    meta.RESTMapper
	converter managedfields.TypeConverter
	mu        sync.Mutex
	managers  map[schema.GroupVersionKind]*managedfields.FieldManager
}

func newFieldManagedTracker(scheme *runtime.Scheme, converters ...managedfields.TypeConverter) *fieldManagedTracker {
	return &fieldManagedTracker{
		ObjectTracker: testing.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder()),
		scheme:        scheme,
		mapper:        testrestmapper.TestOnlyStaticRESTMapper(scheme),
		converter:     firstConverter(converters),
		managers:      map[schema.GroupVersionKind]*managedfields.FieldManager{},
	}
}

func (t *fieldManagedTracker) manager(gvr schema.GroupVersionResource) (schema.GroupVersionKind, *managedfields.FieldManager, error) {
	gvk, err := t.mapper.KindFor(gvr)
	if err != nil {
		return gvk, nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.managers[gvk]; ok {
		return gvk, m, nil
	}
	m, err := managedfields.NewDefaultFieldManager(t.converter, t.scheme, noDefaults{}, t.scheme, gvk, gvk.GroupVersion(), "", nil)
	if err != nil {
		return gvk, nil, err
	}
	t.managers[gvk] = m
	return gvk, m, nil
}

// stored is the object as stored, or an empty one of its kind when there is none yet.
func (t *fieldManagedTracker) stored(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, ns, name string) (runtime.Object, bool, error) {
	obj, err := t.ObjectTracker.Get(gvr, ns, name, metav1.GetOptions{})
	if err == nil {
		return obj, true, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	empty, err := t.scheme.New(gvk)
	if err != nil {
		return nil, false, err
	}
	empty.GetObjectKind().SetGroupVersionKind(gvk)
	return empty, false, nil
}

// updated is the written object with the managedFields an update by `manager` leaves on it.
func (t *fieldManagedTracker) updated(gvr schema.GroupVersionResource, obj runtime.Object, ns, manager string, mustExist bool) (runtime.Object, error) {
	gvk, m, err := t.manager(gvr)
	if err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	live, exists, err := t.stored(gvr, gvk, ns, accessor.GetName())
	if err != nil {
		return nil, err
	}
	if mustExist && !exists {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), accessor.GetName())
	}
	return m.Update(live, obj, manager)
}

func (t *fieldManagedTracker) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	o := single(opts)
	written, err := t.updated(gvr, obj, ns, o.FieldManager, false)
	if err != nil {
		return err
	}
	return t.ObjectTracker.Create(gvr, written, ns, opts...)
}

func (t *fieldManagedTracker) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	o := single(opts)
	written, err := t.updated(gvr, obj, ns, o.FieldManager, true)
	if err != nil {
		return err
	}
	return t.ObjectTracker.Update(gvr, written, ns, opts...)
}

func (t *fieldManagedTracker) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	o := single(opts)
	written, err := t.updated(gvr, obj, ns, o.FieldManager, true)
	if err != nil {
		return err
	}
	return t.ObjectTracker.Patch(gvr, written, ns, opts...)
}

func (t *fieldManagedTracker) Apply(gvr schema.GroupVersionResource, applied runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	o := single(opts)
	gvk, m, err := t.manager(gvr)
	if err != nil {
		return err
	}
	accessor, err := meta.Accessor(applied)
	if err != nil {
		return err
	}
	live, exists, err := t.stored(gvr, gvk, ns, accessor.GetName())
	if err != nil {
		return err
	}
	written, err := m.Apply(live, applied, o.FieldManager, o.Force != nil && *o.Force)
	if err != nil {
		return err
	}
	if !exists {
		return t.ObjectTracker.Create(gvr, written, ns, metav1.CreateOptions{DryRun: o.DryRun, FieldManager: o.FieldManager})
	}
	return t.ObjectTracker.Update(gvr, written, ns, metav1.UpdateOptions{DryRun: o.DryRun, FieldManager: o.FieldManager})
}

func single[T any](opts []T) T {
	var zero T
	if len(opts) == 0 {
		return zero
	}
	return opts[0]
}

// noDefaults: the API server would default the object; these objects arrive already complete.
type noDefaults struct{}

func (noDefaults) Default(runtime.Object) {}

// firstConverter tries each converter in turn: the first that knows the kind converts it.
type firstConverter []managedfields.TypeConverter

func (c firstConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	var errs []error
	for _, converter := range c {
		value, err := converter.ObjectToTyped(obj, opts...)
		if err == nil {
			return value, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no schema for %s: %w", obj.GetObjectKind().GroupVersionKind(), errors.Join(errs...))
}

func (c firstConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	var errs []error
	for _, converter := range c {
		obj, err := converter.TypedToObject(value)
		if err == nil {
			return obj, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// applyStatus makes a server-side apply of a Workload's status as controller-runtime's fake client makes it
// (pkg/client/fake/client.go patch, versioned_tracker.go Apply and updateObject, v0.24.1), without its trips
// through JSON maps and call stacks: the stored Workload with the applied status (through JSON, as the fake client
// sends it: times to the second, as the API server keeps them), managedFields and resourceVersion; an unconditional
// apply takes the stored resourceVersion, a stale one is a conflict; then the field manager's apply, and the
// caller's object becomes what was stored. The fake client copies the stored Workload through JSON on the way in
// and out; here the store's own copies do, as what it keeps is what a JSON copy would give (the apply's result
// comes out of structured-merge-diff as JSON-like maps; TestStatusApplyStoresWhatTheFakeClientStores compares the
// two ways value for value). Kueue writes Workload status so on every admission, eviction, finish and failed
// attempt whose message changed: most of a long replay's writes. handled is false for what it leaves to the fake
// client: another kind, subresource or patch type, a dry run, no field manager, a Workload not stored or being
// deleted.
func (t *fieldManagedTracker) applyStatus(sub string, obj client.Object, patch client.Patch, opts []client.SubResourcePatchOption) (handled bool, err error) {
	applied, ok := obj.(*kueue.Workload)
	if !ok || sub != "status" || patch.Type() != types.ApplyPatchType {
		return false, nil
	}
	options := client.SubResourcePatchOptions{}
	options.ApplyOptions(opts)
	if len(options.DryRun) > 0 || options.SubResourceBody != nil || options.FieldManager == "" {
		return false, nil
	}
	stored, err := t.ObjectTracker.Get(workloadsResource, applied.Namespace, applied.Name, metav1.GetOptions{})
	if err != nil {
		return false, nil
	}
	merged, ok := stored.(*kueue.Workload) // the tracker's own copy
	if !ok || merged.DeletionTimestamp != nil {
		return false, nil
	}
	if version := applied.ResourceVersion; version != "" && version != merged.ResourceVersion {
		return true, apierrors.NewConflict(workloadsResource.GroupResource(), applied.Name, errors.New("object was modified"))
	}
	version, err := strconv.ParseUint(merged.ResourceVersion, 10, 64)
	if err != nil {
		return true, fmt.Errorf("resourceVersion %q: %w", merged.ResourceVersion, err)
	}
	merged.Status = kueue.WorkloadStatus{}
	if err := roundTrip(&applied.Status, &merged.Status); err != nil {
		return true, err
	}
	merged.ManagedFields = applied.ManagedFields
	merged.ResourceVersion = strconv.FormatUint(version+1, 10)
	merged.SetGroupVersionKind(kueue.SchemeGroupVersion.WithKind("Workload"))
	if err := t.Apply(workloadsResource, merged, applied.Namespace, *options.AsPatchOptions()); err != nil {
		return true, err
	}
	written, err := t.ObjectTracker.Get(workloadsResource, applied.Namespace, applied.Name, metav1.GetOptions{})
	if err != nil {
		return true, err
	}
	*applied = *written.(*kueue.Workload) // the tracker's own copy again
	applied.ManagedFields = nil
	applied.TypeMeta = metav1.TypeMeta{}
	return true, nil
}

// roundTrip decodes what `from` encodes to into `to`, as the fake client's copies do.
func roundTrip(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, to)
}
