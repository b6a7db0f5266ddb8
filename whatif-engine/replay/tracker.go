package replay

import (
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/testing"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
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
