package replay

import (
	"container/heap"
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
)

func stored(namespace, name, version string) *kueue.Workload {
	wl := &kueue.Workload{}
	wl.Namespace, wl.Name, wl.ResourceVersion = namespace, name, version
	return wl
}

// Writes Kueue makes from several goroutines at once come out by namespace and name, each Workload's in the order
// they were written; a write that changed nothing is not delivered.
func TestInformerHandsOutChangesInACanonicalOrder(t *testing.T) {
	i := newInformer(nil)
	i.observe(types.NamespacedName{Namespace: "team-b", Name: "x"}, stored("team-b", "x", "1"))
	i.observe(types.NamespacedName{Namespace: "team-a", Name: "y"}, stored("team-a", "y", "2"))
	i.observe(types.NamespacedName{Namespace: "team-a", Name: "y"}, stored("team-a", "y", "3"))
	i.observe(types.NamespacedName{Namespace: "team-a", Name: "y"}, stored("team-a", "y", "3"))
	var got []string
	for {
		c, ok := i.take()
		if !ok {
			break
		}
		got = append(got, c.new.Namespace+"/"+c.new.Name+"@"+c.new.ResourceVersion)
	}
	want := []string{"team-a/y@2", "team-a/y@3", "team-b/x@1"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for index := range want {
		if got[index] != want[index] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// At one instant a job ending comes before a job arriving, then the trace's order.
func TestAgendaOrdersAnInstantFinishesFirstThenTraceOrder(t *testing.T) {
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &world{runs: map[int]int{}}
	w.plan(action{at: now.Add(time.Second), kind: submitAction, job: 0})
	w.plan(action{at: now, kind: submitAction, job: 2})
	w.plan(action{at: now, kind: finishAction, job: 5})
	w.plan(action{at: now, kind: submitAction, job: 1})
	var order []int
	for w.agenda.Len() > 0 {
		order = append(order, heap.Pop(&w.agenda).(action).job)
	}
	want := []int{5, 1, 2, 0}
	for index := range want {
		if order[index] != want[index] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}

// UIDs follow the trace: Kueue breaks a tie on creationTimestamp by UID.
func TestTraceUIDsSortInTraceOrder(t *testing.T) {
	for index := 0; index < 1000; index++ {
		if !(traceUID('b', index) < traceUID('b', index+1)) {
			t.Fatalf("UID %d does not sort before %d", index, index+1)
		}
	}
}

// A Get reads an object as it was last written: a copy, which the reader may change, until the next write.
func TestGetReadsTheLastWriteAndHandsOutCopies(t *testing.T) {
	i := newInformer(nil)
	cl := utiltesting.NewClientBuilder().WithInterceptorFuncs(i.interceptors()).
		WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"v": "1"}}}).
		Build()
	ctx := context.Background()
	read := func() *corev1.Namespace {
		var ns corev1.Namespace
		ns.Labels = map[string]string{"left": "over"} // a Get replaces the whole object
		if err := cl.Get(ctx, types.NamespacedName{Name: "team-a"}, &ns); err != nil {
			t.Fatal(err)
		}
		return &ns
	}
	first := read()
	first.Labels["v"] = "changed by its reader"
	if got := read().Labels; !reflect.DeepEqual(got, map[string]string{"v": "1"}) {
		t.Fatalf("labels %v, want v=1", got)
	}
	written := read()
	written.Labels["v"] = "2"
	if err := cl.Update(ctx, written); err != nil {
		t.Fatal(err)
	}
	if got := read().Labels; !reflect.DeepEqual(got, map[string]string{"v": "2"}) {
		t.Fatalf("labels %v after the update, want v=2", got)
	}
	if err := cl.Delete(ctx, written); err != nil {
		t.Fatal(err)
	}
	var gone corev1.Namespace
	if err := cl.Get(ctx, types.NamespacedName{Name: "team-a"}, &gone); !apierrors.IsNotFound(err) {
		t.Fatalf("a Get after the delete: %v, want not found", err)
	}
}
