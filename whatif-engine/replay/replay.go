package replay

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgoapply "k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/controller/core"
	tasindexer "sigs.k8s.io/kueue/pkg/controller/tas/indexer"
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/resources"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	"sigs.k8s.io/kueue/pkg/scheduler/preemption/fairsharing"
	"sigs.k8s.io/kueue/pkg/util/routine"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
	"sigs.k8s.io/kueue/pkg/util/waitforpodsready"
	"sigs.k8s.io/kueue/pkg/workload"
	workloadfinish "sigs.k8s.io/kueue/pkg/workload/finish"
)

// Unsupported names the Configuration settings the replay cannot honour; a replay refuses them.
func Unsupported(cfg *configapi.Configuration) []string {
	var found []string
	if cfg.AdmissionFairSharing != nil {
		found = append(found, "admissionFairSharing (the LocalQueue usage sampler is not run)")
	}
	if waitforpodsready.Enabled(cfg.WaitForPodsReady) && cfg.WaitForPodsReady.BlockAdmission != nil && *cfg.WaitForPodsReady.BlockAdmission {
		found = append(found, "waitForPodsReady.blockAdmission (pods are ready the moment they start)")
	}
	return found
}

// Run replays the input's jobs and returns what happened to each. Times are seconds from the start of Run on
// the caller's clock: inside a synctest bubble, virtual seconds.
func Run(ctx context.Context, cfg *configapi.Configuration, in *Input, progress io.Writer) ([]Event, error) {
	if unsupported := Unsupported(cfg); len(unsupported) > 0 {
		return nil, fmt.Errorf("the virtual engine cannot honour: %v", unsupported)
	}
	if err := cacheTopologyTree(cfg); err != nil {
		return nil, err
	}
	scheme := Scheme()
	objects, err := decode(scheme, in)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := logr.Discard()
	start := time.Now()

	kueueSchemas, err := crdTypeConverter(in.CRDs)
	if err != nil {
		return nil, err
	}
	tracker := newFieldManagedTracker(scheme, kueueSchemas, clientgoapply.NewTypeConverter(clientgoscheme.Scheme))
	informer := newInformer(tracker)
	builder := utiltesting.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&kueue.Workload{}, &kueue.ClusterQueue{}, &kueue.LocalQueue{}, &batchv1.Job{}).
		// Server-side apply as the API server does it (field managers, list-maps merged by key), from Kueue's
		// CRDs and the built-in types' schemas: Kueue writes Workload status so.
		WithObjectTracker(tracker).
		WithInterceptorFuncs(informer.interceptors())
	if err := tasindexer.SetupIndexes(ctx, utiltesting.AsIndexer(builder)); err != nil {
		return nil, err
	}
	cl := builder.Build()

	// Wired as cmd/kueue/main.go wires them, with the options the Configuration implies.
	formatter := resources.NewResourceFormatter()
	cacheOptions := []schdcache.Option{
		schdcache.WithPodsReadyTracking(false),
		schdcache.WithResourceFormatter(formatter),
	}
	queueOptions := []qcache.Option{
		qcache.WithPodsReadyRequeuingTimestamp(podsReadyRequeuingTimestamp(cfg)),
		qcache.WithResourceFormatter(formatter),
	}
	if cfg.Resources != nil && len(cfg.Resources.ExcludeResourcePrefixes) > 0 {
		cacheOptions = append(cacheOptions, schdcache.WithExcludedResourcePrefixes(cfg.Resources.ExcludeResourcePrefixes))
		queueOptions = append(queueOptions, qcache.WithExcludedResourcePrefixes(cfg.Resources.ExcludeResourcePrefixes))
	}
	if cfg.Resources != nil && len(cfg.Resources.Transformations) > 0 {
		cacheOptions = append(cacheOptions, schdcache.WithResourceTransformations(cfg.Resources.Transformations))
		queueOptions = append(queueOptions, qcache.WithResourceTransformations(cfg.Resources.Transformations))
	}
	if cfg.FairSharing != nil {
		cacheOptions = append(cacheOptions, schdcache.WithFairSharing(fairsharing.Enabled(cfg.FairSharing)))
	}
	cache := schdcache.New(cl, cacheOptions...)
	requeuer := qcache.NewRequeuer()
	expectations := preemptexpectations.New()
	queueOptions = append(queueOptions, qcache.WithPreemptionExpectations(expectations))
	queues := qcache.NewManager(cl, cache, requeuer, queueOptions...)
	recorder := droppedEvents{}
	workloads := core.NewWorkloadReconciler(cl, queues, cache, recorder,
		core.WithPreemptionExpectations(expectations),
		core.WithResourceFormatter(formatter),
	)
	// Kueue applies each admission in a goroutine of its own, so that the API call does not hold up the next
	// cycle; here API calls take no time, and inline the admission comes before the next cycle on every run.
	routine.DefaultWrapper = inline{}
	sched := scheduler.New(queues, cache, cl, recorder,
		scheduler.WithPodsReadyRequeuingTimestamp(podsReadyRequeuingTimestamp(cfg)),
		scheduler.WithFairSharing(cfg.FairSharing),
		scheduler.WithQuotaCheckStrategy(configapi.QuotaCheckBlockUndeclared),
		scheduler.WithPreemptionExpectations(expectations),
		scheduler.WithResourceFormatter(formatter),
	)

	record := newRecorder(start, in.Jobs)
	record.progress = progress
	world := newWorld(cl, start, in.Jobs, record, waitforpodsready.Enabled(cfg.WaitForPodsReady))
	manager := newManager(informer, workloads, world, record, tracker)

	var running sync.WaitGroup
	goRun := func(f func()) {
		running.Add(1)
		go func() {
			defer running.Done()
			f()
		}()
	}
	// Every goroutine of the replay ends before Run returns, whatever happened: a synctest bubble requires it.
	defer func() {
		cancel()
		queues.Broadcast() // the scheduler waits for heads; it sees the cancelled context on waking
		running.Wait()
	}()
	goRun(func() { _ = requeuer.Start(ctx) })
	goRun(func() { queues.CleanUpOnContext(ctx) })
	goRun(func() { cache.CleanUpOnContext(ctx) })
	if err := load(ctx, log, cl, cache, queues, objects); err != nil {
		return nil, err
	}
	if err := sched.Start(ctx); err != nil {
		return nil, err
	}
	if err := manager.run(ctx, start.Add(seconds(in.Horizon))); err != nil {
		return nil, err
	}
	end := time.Since(start).Seconds()
	return record.result(end), nil
}

// cacheTopologyTree turns on Kueue's TASCacheTopologyTree gate unless the Configuration sets it. The gate keeps
// the topology tree a scheduling cycle's snapshot builds from the nodes and reuses it until the node set changes
// (pkg/cache/scheduler/tas_flavor.go, cachedOrBuiltTree); the tree is the nodes' static structure, shared
// read-only by the snapshots, and every snapshot's usage is its own. A replay's nodes never change, so each cycle
// would rebuild the same tree: the same decisions, without a tree of every node per cycle.
func cacheTopologyTree(cfg *configapi.Configuration) error {
	if _, set := cfg.FeatureGates[string(features.TASCacheTopologyTree)]; set {
		return nil
	}
	return utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.TASCacheTopologyTree): true})
}

func podsReadyRequeuingTimestamp(cfg *configapi.Configuration) configapi.RequeuingTimestamp {
	// As cmd/kueue/main.go: the Eviction timestamp unless the Configuration says otherwise.
	if cfg.WaitForPodsReady != nil && cfg.WaitForPodsReady.RequeuingStrategy != nil &&
		cfg.WaitForPodsReady.RequeuingStrategy.Timestamp != nil {
		return *cfg.WaitForPodsReady.RequeuingStrategy.Timestamp
	}
	return configapi.EvictionTimestamp
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// load creates the config's objects and hands them to Kueue's cache and queue manager as its ResourceFlavor,
// Topology, Cohort, ClusterQueue and LocalQueue controllers (and the TAS node controller) do on their create events.
func load(ctx context.Context, log logr.Logger, cl client.Client, cache *schdcache.Cache, queues *qcache.Manager, o *decoded) error {
	create := func(obj client.Object) error {
		if err := cl.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	}
	for _, ns := range o.namespaces {
		if err := create(ns); err != nil {
			return err
		}
	}
	for _, wpc := range o.priorities {
		if err := create(wpc); err != nil {
			return err
		}
	}
	for _, node := range o.nodes {
		if err := create(node); err != nil {
			return err
		}
		cache.TASCache().SyncNode(node)
	}
	for _, topology := range o.topologies {
		if err := create(topology); err != nil {
			return err
		}
		cache.AddOrUpdateTopology(log, topology)
	}
	for _, flavor := range o.flavors {
		if err := create(flavor); err != nil {
			return err
		}
		cache.AddOrUpdateResourceFlavor(log, flavor)
	}
	for _, cohort := range o.cohorts {
		if err := create(cohort); err != nil {
			return err
		}
		if err := cache.AddOrUpdateCohort(cohort); err != nil {
			return err
		}
		queues.AddOrUpdateCohort(ctx, cohort)
	}
	for _, cq := range o.queues {
		if err := create(cq); err != nil {
			return err
		}
		if err := cache.AddClusterQueue(ctx, cq); err != nil {
			return fmt.Errorf("ClusterQueue %s: %w", cq.Name, err)
		}
		if err := queues.AddClusterQueue(ctx, cq); err != nil {
			return fmt.Errorf("ClusterQueue %s: %w", cq.Name, err)
		}
	}
	for _, lq := range o.local {
		if err := create(lq); err != nil {
			return err
		}
		if err := cache.AddLocalQueue(lq); err != nil {
			return fmt.Errorf("LocalQueue %s/%s: %w", lq.Namespace, lq.Name, err)
		}
		if err := queues.AddLocalQueue(ctx, lq); err != nil {
			return fmt.Errorf("LocalQueue %s/%s: %w", lq.Namespace, lq.Name, err)
		}
	}
	for _, cq := range o.queues {
		if !cache.ClusterQueueActive(kueue.ClusterQueueReference(cq.Name)) {
			_, reason, message := cache.ClusterQueueReadiness(kueue.ClusterQueueReference(cq.Name))
			return fmt.Errorf("ClusterQueue %s is not active: %s: %s", cq.Name, reason, message)
		}
	}
	return nil
}

// recorder turns the Workloads the informer delivers into job events, as the cluster engine's watch does. Only
// the manager's goroutine uses it.
type recorder struct {
	start     time.Time
	jobs      []Job
	index     map[string]int // Workload name -> trace index
	events    []indexed
	admitted  map[int]bool
	message   map[int]string
	over      map[int]bool
	finishedN int
	progress  io.Writer // where a line goes each time another percent of the jobs has finished
}

type indexed struct {
	job   int
	event Event
}

func newRecorder(start time.Time, jobs []Job) *recorder {
	r := &recorder{
		start:    start,
		jobs:     jobs,
		index:    map[string]int{},
		admitted: map[int]bool{},
		message:  map[int]string{},
		over:     map[int]bool{},
	}
	return r
}

func (r *recorder) now() float64 {
	return float64(time.Since(r.start).Milliseconds()) / 1000
}

func (r *recorder) add(job int, kind, detail string) {
	r.events = append(r.events, indexed{job, Event{Time: r.now(), Job: r.jobs[job].Name, Kind: kind, Detail: detail}})
}

func (r *recorder) submitted(job int, workload string) {
	r.index[workload] = job
	r.add(job, "submitted", "")
}

func (r *recorder) see(wl *kueue.Workload) {
	job, ok := r.index[wl.Name]
	if !ok {
		return
	}
	state := readState(wl)
	switch {
	case state.finished:
		r.finish(job)
	case state.admitted && !r.admitted[job]:
		r.admitted[job] = true
		delete(r.message, job)
		r.add(job, "admitted", "")
	case !state.admitted && r.admitted[job]:
		r.admitted[job] = false
		r.add(job, "evicted", state.evictedReason)
	}
	if !state.admitted && !state.finished && state.pendingMessage != "" && r.message[job] != state.pendingMessage {
		r.message[job] = state.pendingMessage
		r.add(job, "pending", state.pendingMessage)
	}
}

// finish records a job's end, once.
func (r *recorder) finish(job int) {
	if r.over[job] {
		return
	}
	r.over[job] = true
	if !r.admitted[job] {
		r.add(job, "admitted", "")
	}
	r.admitted[job] = false
	r.add(job, "finished", "")
	r.finishedN++
	if r.progress != nil && (r.finishedN%max(1, len(r.jobs)/100) == 0 || r.finishedN == len(r.jobs)) {
		// A line a percent: the replay's own wall time cannot be read inside the bubble, the trace's time can.
		fmt.Fprintf(r.progress, "progress %.0f %d %d\n", r.now(), r.finishedN, len(r.jobs))
	}
}

func (r *recorder) allFinished() bool {
	return r.finishedN == len(r.jobs)
}

// result: the events by time, then trace order; one job's events keep the order they happened in.
func (r *recorder) result(end float64) []Event {
	events := append([]indexed(nil), r.events...)
	sort.SliceStable(events, func(a, b int) bool {
		if events[a].event.Time != events[b].event.Time {
			return events[a].event.Time < events[b].event.Time
		}
		return events[a].job < events[b].job
	})
	result := make([]Event, 0, len(events)+1)
	for _, e := range events {
		result = append(result, e.event)
	}
	result = append(result, Event{Time: float64(int64(end*1000)) / 1000, Kind: "end"})
	return result
}

// state is what the recorder reads of a Workload, as the cluster engine's watch reads it.
type state struct {
	admitted       bool
	finished       bool
	evictedReason  string
	pendingMessage string // QuotaReserved=False: why Kueue could not admit it
}

func readState(wl *kueue.Workload) state {
	s := state{admitted: workload.IsAdmitted(wl), finished: workloadfinish.IsFinished(wl)}
	if evicted := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); evicted != nil {
		s.evictedReason = evicted.Reason
	}
	if reserved := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); reserved != nil &&
		reserved.Status == metav1.ConditionFalse {
		s.pendingMessage = reserved.Message
	}
	return s
}

// droppedEvents is Kueue's event recorder here: a replay reads Workloads, never Events, and Kueue records one for
// every failed admission attempt (pkg/scheduler/scheduler.go, requeueAndUpdate); keeping them all, as Kueue's test
// recorder does, cost a seventh of the engine's CPU on a long trace.
type droppedEvents struct{}

func (droppedEvents) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

// inline runs a function where it is called: the scheduler's admissions, in this replay.
type inline struct{}

func (inline) Run(f func()) { f() }
