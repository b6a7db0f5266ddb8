package replay

import (
	"context"
	"reflect"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// change is one write to a Workload as an informer delivers it: old is nil for a create, new nil for a delete.
type change struct {
	old, new *kueue.Workload
}

// informer plays the shared informer of a controller manager for Workloads: every write that reaches the
// in-memory API is kept, in write order per Workload, for the replay's one consumer, and the consumer is woken.
type informer struct {
	mu      sync.Mutex
	pending []change
	last    map[types.NamespacedName]*kueue.Workload
	signal  chan struct{}
	writeMu sync.Mutex                // a write and its delivery happen together, so one Workload's deliveries keep its writes' order
	reads   map[readKey]client.Object // under writeMu: each object as a Get decoded it, until the next write to it
	tracker *fieldManagedTracker      // the in-memory API's store: Workload status applies go to it directly (nil: through the fake client)
}

type readKey struct {
	kind reflect.Type
	key  types.NamespacedName
}

func newInformer(tracker *fieldManagedTracker) *informer {
	return &informer{
		last:    map[types.NamespacedName]*kueue.Workload{},
		signal:  make(chan struct{}, 1),
		reads:   map[readKey]client.Object{},
		tracker: tracker,
	}
}

// observe records the Workload's state after a write (nil: it is gone).
func (i *informer) observe(key types.NamespacedName, now *kueue.Workload) {
	i.mu.Lock()
	defer i.mu.Unlock()
	before := i.last[key]
	if now == nil {
		if before == nil {
			return
		}
		delete(i.last, key)
		i.pending = append(i.pending, change{old: before})
	} else {
		if before != nil && before.ResourceVersion == now.ResourceVersion {
			return // a write that changed nothing
		}
		i.last[key] = now
		i.pending = append(i.pending, change{old: before, new: now})
	}
	select {
	case i.signal <- struct{}{}:
	default:
	}
}

// take hands out the next change: of the Workloads with changes waiting, the first by namespace and name, and
// its oldest change. Writes that Kueue makes at once from several goroutines (a preemption's evictions) so come
// out in the same order on every run.
func (i *informer) take() (change, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	chosen := -1
	var chosenKey types.NamespacedName
	for index, c := range i.pending {
		key := c.key()
		if chosen < 0 || key.Namespace < chosenKey.Namespace ||
			(key.Namespace == chosenKey.Namespace && key.Name < chosenKey.Name) {
			chosen, chosenKey = index, key
		}
	}
	if chosen < 0 {
		return change{}, false
	}
	c := i.pending[chosen]
	i.pending = append(i.pending[:chosen], i.pending[chosen+1:]...)
	return c, true
}

// forget drops what the informer remembers of a Workload that is gone without an event, and of its Job.
func (i *informer) forget(key types.NamespacedName, job string) {
	i.mu.Lock()
	delete(i.last, key)
	i.mu.Unlock()
	i.writeMu.Lock()
	defer i.writeMu.Unlock()
	delete(i.reads, readKey{reflect.TypeFor[*kueue.Workload](), key})
	if job != "" {
		delete(i.reads, readKey{reflect.TypeFor[*batchv1.Job](), types.NamespacedName{Namespace: key.Namespace, Name: job}})
	}
}

// get is a Get as a manager's cached client does it: it replaces the whole object it reads into (the in-memory
// client decodes into it and would keep fields the stored object lacks, a cleared admission). What it decodes
// is kept until the object's next write (every write passes the interceptors; a finished Workload and its Job
// that leave without one are forgotten), and the next Get of it is a copy: the same object without decoding
// it again (a Namespace is read for every parked Workload that Kueue requeues).
func (i *informer) get(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	value := reflect.ValueOf(obj).Elem()
	value.Set(reflect.Zero(value.Type()))
	if !cacheable(obj) || len(opts) > 0 {
		return c.Get(ctx, key, obj, opts...)
	}
	i.writeMu.Lock()
	defer i.writeMu.Unlock()
	read := readKey{reflect.TypeOf(obj), key}
	if known, ok := i.reads[read]; ok {
		value.Set(reflect.ValueOf(known.DeepCopyObject()).Elem())
		return nil
	}
	if err := c.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	i.reads[read] = obj.DeepCopyObject().(client.Object)
	return nil
}

// cacheable: a typed object, whose Go type names its kind.
func cacheable(obj client.Object) bool {
	switch obj.(type) {
	case runtime.Unstructured, *metav1.PartialObjectMetadata:
		return false
	}
	return true
}

func (c change) key() types.NamespacedName {
	if c.new != nil {
		return types.NamespacedName{Namespace: c.new.Namespace, Name: c.new.Name}
	}
	return types.NamespacedName{Namespace: c.old.Namespace, Name: c.old.Name}
}

// write makes a write and hands the Workload it leaves to the informer: read back, or as the write left it in obj
// when that is what a Get would read (asRead: a status apply made on the store, applyStatus).
func (i *informer) write(ctx context.Context, c client.Client, obj client.Object, write func() (asRead bool, err error)) error {
	i.writeMu.Lock()
	defer i.writeMu.Unlock()
	asRead, err := write()
	key := client.ObjectKeyFromObject(obj)
	delete(i.reads, readKey{reflect.TypeOf(obj), key})
	if err != nil {
		return err
	}
	wl, ok := obj.(*kueue.Workload)
	switch {
	case !ok:
	case asRead:
		i.keep(key, wl.DeepCopy())
	default:
		var fresh kueue.Workload
		if err := c.Get(ctx, key, &fresh); err != nil {
			i.observe(key, nil)
			return nil
		}
		i.keep(key, &fresh)
	}
	return nil
}

// keep makes a Workload as just written what reads get (as copies: it is never changed) and delivers it.
func (i *informer) keep(key types.NamespacedName, fresh *kueue.Workload) {
	i.reads[readKey{reflect.TypeOf(fresh), key}] = fresh
	i.observe(key, fresh)
}

// interceptors route every write through write.
func (i *informer) interceptors() interceptor.Funcs {
	written := func(ctx context.Context, c client.Client, obj client.Object, write func() error) error {
		return i.write(ctx, c, obj, func() (bool, error) { return false, write() })
	}
	return interceptor.Funcs{
		Get: i.get,
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return written(ctx, c, obj, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return written(ctx, c, obj, func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return written(ctx, c, obj, func() error { return c.Patch(ctx, obj, patch, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return written(ctx, c, obj, func() error { return c.Delete(ctx, obj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return written(ctx, c, obj, func() error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return i.write(ctx, c, obj, func() (bool, error) {
				if i.tracker != nil {
					if handled, err := i.tracker.applyStatus(sub, obj, patch, opts); handled {
						return true, err
					}
				}
				return false, c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			})
		},
	}
}
