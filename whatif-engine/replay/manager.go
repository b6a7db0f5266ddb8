package replay

import (
	"container/heap"
	"context"
	"testing/synctest"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/core"
	workloadfinish "sigs.k8s.io/kueue/pkg/workload/finish"
)

// manager is the replay's controller manager, one goroutine: it delivers each Workload change to the event
// handlers of Kueue's Workload controller, runs Kueue's Workload reconciler on what changed, and performs the
// world's actions when they come due. Kueue's scheduler and requeuer run in goroutines of their own, as in Kueue;
// before each step the manager waits until they have nothing left to do (synctest.Wait), and each step touches
// Kueue last, so the scheduler never runs beside the manager and every run makes the same decisions in the same
// order.
type manager struct {
	informer   *informer
	workloads  *core.WorkloadReconciler
	world      *world
	record     *recorder
	tracker    *fieldManagedTracker
	reconciles []types.NamespacedName
	queued     map[types.NamespacedName]bool
	failures   map[types.NamespacedName]int
}

func newManager(i *informer, r *core.WorkloadReconciler, w *world, record *recorder, t *fieldManagedTracker) *manager {
	return &manager{
		informer:  i,
		tracker:   t,
		workloads: r,
		world:     w,
		record:    record,
		queued:    map[types.NamespacedName]bool{},
		failures:  map[types.NamespacedName]int{},
	}
}

// run works until every job has finished, the clock reaches the horizon or the context ends.
func (m *manager) run(ctx context.Context, horizon time.Time) error {
	for {
		synctest.Wait()
		if ctx.Err() != nil || m.record.allFinished() || !time.Now().Before(horizon) {
			return nil
		}
		if c, ok := m.informer.take(); ok {
			m.deliver(ctx, c)
			continue
		}
		if len(m.reconciles) > 0 {
			m.reconcile(ctx)
			continue
		}
		due, next, planned := m.world.due()
		if due != nil {
			if err := m.perform(ctx, *due); err != nil {
				return err
			}
			continue
		}
		until := horizon
		if planned && next.Before(until) {
			until = next
		}
		timer := time.NewTimer(time.Until(until))
		select {
		case <-timer.C:
		case <-m.informer.signal: // the scheduler or the requeuer wrote
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// deliver: what the job framework does for the Workload's Job, then Kueue's event handler (which may wake the
// scheduler: last), and the Workload queued for Kueue's reconciler.
func (m *manager) deliver(ctx context.Context, c change) {
	if c.new != nil {
		m.record.see(c.new)
		m.world.see(ctx, c.new)
	}
	m.enqueue(c.key())
	switch {
	case c.old == nil:
		m.workloads.Create(event.TypedCreateEvent[*kueue.Workload]{Object: c.new.DeepCopy()})
	case c.new == nil:
		m.workloads.Delete(event.TypedDeleteEvent[*kueue.Workload]{Object: c.old.DeepCopy()})
	default:
		m.workloads.Update(event.TypedUpdateEvent[*kueue.Workload]{ObjectOld: c.old.DeepCopy(), ObjectNew: c.new.DeepCopy()})
	}
	if c.new != nil && workloadfinish.IsFinished(c.new) {
		m.forget(c.new)
	}
}

// forget drops a finished Workload and its Job from the in-memory API once Kueue has seen it finish, without an
// event: Kueue's cache and queues hold it no longer, nothing reads it again, and a long trace would otherwise keep
// every job it ever ran. (The reconciler, if the Workload is still queued for it, finds it gone and stops.)
func (m *manager) forget(wl *kueue.Workload) {
	_ = m.tracker.ObjectTracker.Delete(workloadsResource, wl.Namespace, wl.Name)
	job := ""
	for _, owner := range wl.OwnerReferences {
		if owner.Kind == "Job" {
			job = owner.Name
			_ = m.tracker.ObjectTracker.Delete(jobsResource, wl.Namespace, owner.Name)
		}
	}
	m.informer.forget(types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}, job)
}

var (
	workloadsResource = kueue.SchemeGroupVersion.WithResource("workloads")
	jobsResource      = batchv1.SchemeGroupVersion.WithResource("jobs")
)

func (m *manager) enqueue(key types.NamespacedName) {
	if !m.queued[key] {
		m.queued[key] = true
		m.reconciles = append(m.reconciles, key)
	}
}

// reconcile runs Kueue's Workload reconciler on the oldest queued Workload, as a controller with one worker: a
// RequeueAfter comes back on the clock, an error after controller-runtime's default backoff (5 ms, doubling).
func (m *manager) reconcile(ctx context.Context) {
	key := m.reconciles[0]
	m.reconciles = m.reconciles[1:]
	delete(m.queued, key)
	result, err := m.workloads.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	switch {
	case err != nil && ctx.Err() == nil:
		m.failures[key]++
		m.world.plan(action{at: time.Now().Add(5 * time.Millisecond << min(m.failures[key]-1, 17)), kind: reconcileAction, key: key})
	case result.RequeueAfter > 0:
		delete(m.failures, key)
		m.world.plan(action{at: time.Now().Add(result.RequeueAfter), kind: reconcileAction, key: key})
	default:
		delete(m.failures, key)
	}
}

func (m *manager) perform(ctx context.Context, a action) error {
	if a.kind == reconcileAction {
		m.enqueue(a.key)
		return nil
	}
	return m.world.perform(ctx, a)
}

// due pops the first action if its time has come; else it says when the next one is, if any.
func (w *world) due() (*action, time.Time, bool) {
	if len(w.agenda) == 0 {
		return nil, time.Time{}, false
	}
	if w.agenda[0].at.After(time.Now()) {
		return nil, w.agenda[0].at, true
	}
	first := heap.Pop(&w.agenda).(action)
	return &first, first.at, true
}
