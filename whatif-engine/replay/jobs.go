package replay

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	jobpkg "sigs.k8s.io/kueue/pkg/controller/jobs/job"
	"sigs.k8s.io/kueue/pkg/workload"
	workloadfinish "sigs.k8s.io/kueue/pkg/workload/finish"
	workloadpatching "sigs.k8s.io/kueue/pkg/workload/patching"
)

// The messages Kueue's job framework writes (pkg/controller/jobframework/reconciler.go).
const (
	finishedMessage  = "Job finished successfully"
	podsReadyMessage = "All pods reached readiness and the workload is running"
)

type actionKind int

const (
	finishAction    actionKind = iota // before a submission of the same instant: a job ending frees its GPUs first
	submitAction                      // a trace job arrives
	reconcileAction                   // a RequeueAfter of Kueue's Workload reconciler comes due
)

type action struct {
	at    time.Time
	kind  actionKind
	job   int
	run   int                  // finish: which admission of the job it ends
	key   types.NamespacedName // reconcile: the Workload
	order int                  // ties: the order actions were planned in
}

type agenda []action

func (a agenda) Len() int { return len(a) }
func (a agenda) Less(i, j int) bool {
	switch {
	case !a[i].at.Equal(a[j].at):
		return a[i].at.Before(a[j].at)
	case a[i].kind != a[j].kind:
		return a[i].kind < a[j].kind
	case a[i].job != a[j].job:
		return a[i].job < a[j].job
	}
	return a[i].order < a[j].order
}
func (a agenda) Swap(i, j int) { a[i], a[j] = a[j], a[i] }
func (a *agenda) Push(x any)   { *a = append(*a, x.(action)) }
func (a *agenda) Pop() any {
	old := *a
	last := old[len(old)-1]
	*a = old[:len(old)-1]
	return last
}

// world is the trace's side of the replay: it submits each job at its time and plays what Kueue's job framework
// does for a batch Job (pkg/controller/jobframework/reconciler.go): start the job when its Workload is admitted,
// mark the Workload finished when its pods would end, and on eviction stop the job, then release its quota and
// set Requeued. Its agenda holds these actions, and the Workload reconciler's RequeueAfter, in time order.
type world struct {
	cl        client.Client
	jobs      []Job
	record    *recorder
	podsReady bool
	agenda    agenda
	planned   int
	runs      map[int]int        // job -> its current admission's number; 0: not running
	started   int                // admissions so far: each run's number
	names     map[string]int     // Workload name -> job
	keys      []client.ObjectKey // job -> its Workload, once submitted
}

func newWorld(cl client.Client, start time.Time, jobs []Job, record *recorder, podsReady bool) *world {
	w := &world{
		cl:        cl,
		jobs:      jobs,
		record:    record,
		podsReady: podsReady,
		runs:      map[int]int{},
		names:     map[string]int{},
		keys:      make([]client.ObjectKey, len(jobs)),
	}
	for index := range jobs {
		w.plan(action{at: start.Add(seconds(jobs[index].Submit)), kind: submitAction, job: index})
	}
	return w
}

// plan adds an action. Only the manager's goroutine uses the world.
func (w *world) plan(a action) {
	a.order = w.planned
	w.planned++
	heap.Push(&w.agenda, a)
}

func (w *world) perform(ctx context.Context, a action) error {
	switch a.kind {
	case submitAction:
		return w.submit(ctx, a.job)
	case finishAction:
		current := w.runs[a.job] == a.run
		if current {
			w.runs[a.job] = 0
		}
		if !current {
			return nil // the run was evicted before it could end
		}
		return w.retry(ctx, a.job, func(wl *kueue.Workload) error {
			if workloadfinish.IsFinished(wl) || !workload.IsAdmitted(wl) {
				return nil
			}
			return workloadfinish.Finish(ctx, w.cl, wl, kueue.WorkloadFinishedReasonSucceeded, finishedMessage, clock.RealClock{})
		})
	}
	return nil
}

// traceUID: UIDs in trace order. Kueue breaks a tie on creationTimestamp (whole seconds) by UID, so jobs
// submitted in the same second queue in the order of the trace.
func traceUID(kind byte, index int) types.UID {
	return types.UID(fmt.Sprintf("00000000-0000-4000-%c000-%012d", kind, index))
}

// submit creates the Job (suspended, as Kueue's Job webhook leaves a queued Job) and its Workload as Kueue's job
// framework constructs it from the Job (pkg/controller/jobframework: ConstructWorkload, PrepareWorkloadPriority).
func (w *world) submit(ctx context.Context, index int) error {
	trace := &w.jobs[index]
	var job batchv1.Job
	if err := json.Unmarshal(trace.Manifest, &job); err != nil {
		return fmt.Errorf("job %s: its manifest: %w", trace.Name, err)
	}
	now := metav1.NewTime(time.Now())
	job.UID = traceUID('a', index)
	job.CreationTimestamp = now
	job.Spec.Suspend = ptr.To(true)
	if err := w.cl.Create(ctx, &job); err != nil {
		return fmt.Errorf("job %s: %w", trace.Name, err)
	}
	wl, err := jobframework.ConstructWorkload(ctx, w.cl, (*jobpkg.Job)(&job), nil, nil)
	if err != nil {
		return fmt.Errorf("job %s: constructing its Workload: %w", trace.Name, err)
	}
	if err := jobframework.PrepareWorkloadPriority(ctx, w.cl, &job, wl, nil); err != nil {
		return fmt.Errorf("job %s: its priority: %w", trace.Name, err)
	}
	wl.UID = traceUID('b', index)
	wl.CreationTimestamp = now
	w.names[wl.Name] = index
	w.keys[index] = client.ObjectKeyFromObject(wl)
	w.record.submitted(index, wl.Name)
	if err := w.cl.Create(ctx, wl); err != nil {
		return fmt.Errorf("job %s: creating its Workload: %w", trace.Name, err)
	}
	return nil
}

// see is the job framework's reconciler for the Job that owns a Workload whose new state the informer delivers.
func (w *world) see(ctx context.Context, delivered *kueue.Workload) {
	index, ok := w.names[delivered.Name]
	if !ok || workloadfinish.IsFinished(delivered) {
		return
	}
	evicted := apimeta.FindStatusCondition(delivered.Status.Conditions, kueue.WorkloadEvicted)
	switch {
	case evicted != nil && evicted.Status == metav1.ConditionTrue && workload.HasQuotaReservation(delivered):
		// 6. handle eviction: stop the job (its pods end at once here), then clear the admission.
		w.runs[index] = 0
		_ = w.retry(ctx, index, func(wl *kueue.Workload) error {
			condition := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
			if condition == nil || condition.Status != metav1.ConditionTrue || !workload.HasQuotaReservation(wl) {
				return nil
			}
			return workloadpatching.PatchAdmissionStatus(ctx, w.cl, wl, clock.RealClock{}, func(wl *kueue.Workload) (bool, error) {
				setRequeued := condition.Reason == kueue.WorkloadEvictedByPreemption ||
					condition.Reason == kueue.WorkloadEvictedDueToNodeFailures
				updated := workload.SetRequeuedCondition(wl, condition.Reason, condition.Message, setRequeued)
				reason := workload.UnadmittedWorkloadReasonWithFallback(
					kueue.WorkloadQuotaReservedReasonPendingEvaluation,
					kueue.WorkloadPending, //nolint:staticcheck // as the job framework does
				)
				if workload.UnsetQuotaReservationWithCondition(wl, reason, condition.Message, time.Now()) {
					updated = true
				}
				return updated, nil
			})
		})
	case workload.IsAdmitted(delivered):
		if w.runs[index] != 0 {
			return
		}
		w.started++
		run := w.started
		w.runs[index] = run
		w.plan(action{at: time.Now().Add(seconds(w.jobs[index].Duration)), kind: finishAction, job: index, run: run})
		if w.podsReady {
			// 5. waitForPodsReady: the pods start at once, so the condition is true at admission.
			_ = w.retry(ctx, index, func(wl *kueue.Workload) error {
				if !workload.IsAdmitted(wl) || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadPodsReady) {
					return nil
				}
				return workload.SetConditionAndUpdate(ctx, w.cl, wl, kueue.WorkloadPodsReady, metav1.ConditionTrue,
					kueue.WorkloadStarted, podsReadyMessage, constants.JobControllerName, clock.RealClock{})
			})
		}
	}
}

// retry runs an update of the job's Workload on its latest state until it does not conflict, as a controller's
// requeue would.
func (w *world) retry(ctx context.Context, index int, update func(*kueue.Workload) error) error {
	for attempt := 0; ; attempt++ {
		key := w.keys[index]
		var wl kueue.Workload
		if err := w.cl.Get(ctx, key, &wl); err != nil {
			return client.IgnoreNotFound(err)
		}
		err := update(&wl)
		if err == nil || !apierrors.IsConflict(err) || attempt >= 20 || ctx.Err() != nil {
			return err
		}
	}
}
