package replay

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoapply "k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
	testingwl "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
	"sigs.k8s.io/kueue/pkg/workload"
	workloadpatching "sigs.k8s.io/kueue/pkg/workload/patching"
)

// kueueCRDs reads the pinned Kueue module's CRDs, as the installer hands them to the engine.
func kueueCRDs(t *testing.T) []apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue").Output()
	if err != nil {
		t.Fatalf("locating the Kueue module: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "config", "components", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("Kueue's CRDs: %v (%d files)", err, len(files))
	}
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		crds = append(crds, crd)
	}
	return crds
}

// A Workload status apply made directly on the tracker leaves the same stored object (managedFields, resource
// version and all) and hands the writer and the informer the same objects as the fake client's own way, through a
// write sequence Kueue makes: a pending message, an admission, an eviction that drops the admission, and a stale
// strict apply. Compared as Go values too, not only as JSON: the fake client copies every object through JSON,
// the direct way hands out the store's own copies, so a difference JSON does not show (a time's fraction of a
// second, an empty list against none) would change what Kueue reads.
func TestStatusApplyStoresWhatTheFakeClientStores(t *testing.T) {
	crds := kueueCRDs(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var stored [2]string
		var returned [2][]string
		var values [2][]any
		for side, direct := range []bool{true, false} {
			schemas, err := crdTypeConverter(crds)
			if err != nil {
				t.Fatal(err)
			}
			tracker := newFieldManagedTracker(Scheme(), schemas, clientgoapply.NewTypeConverter(clientgoscheme.Scheme))
			i := newInformer(nil)
			if direct {
				i = newInformer(tracker)
			}
			cl := utiltesting.NewClientBuilder().WithScheme(Scheme()).WithStatusSubresource(&kueue.Workload{}).
				WithObjectTracker(tracker).WithInterceptorFuncs(i.interceptors()).Build()
			wl := testingwl.MakeWorkload("job-1", "team-a").Queue("default").Request("nvidia.com/gpu", "8").Obj()
			if err := cl.Create(ctx, wl); err != nil {
				t.Fatal(err)
			}
			apply := func(update func(*kueue.Workload) bool, options ...workloadpatching.PatchStatusOption) error {
				var read kueue.Workload
				if err := cl.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "job-1"}, &read); err != nil {
					t.Fatal(err)
				}
				err := workloadpatching.PatchAdmissionStatus(ctx, cl, &read, clock.RealClock{}, func(w *kueue.Workload) (bool, error) {
					return update(w), nil
				}, options...)
				shown, _ := json.Marshal(read)
				delivered, _ := json.Marshal(i.last[types.NamespacedName{Namespace: "team-a", Name: "job-1"}])
				returned[side] = append(returned[side], string(shown), string(delivered))
				values[side] = append(values[side], read.DeepCopy(), i.last[types.NamespacedName{Namespace: "team-a", Name: "job-1"}].DeepCopy())
				return err
			}
			loose := []workloadpatching.PatchStatusOption{workloadpatching.WithLooseOnApply(), workloadpatching.WithRetryOnConflict()}
			if err := apply(func(w *kueue.Workload) bool {
				return workload.UnsetQuotaReservationWithCondition(w, "Pending", "couldn't assign flavors: 8 more needed", clock.RealClock{}.Now())
			}, loose...); err != nil {
				t.Fatal(err)
			}
			admission := testingwl.MakeAdmission("team-a").Obj()
			if err := apply(func(w *kueue.Workload) bool {
				return workload.SetQuotaReservation(w, admission, clock.RealClock{})
			}); err != nil {
				t.Fatal(err)
			}
			if err := apply(func(w *kueue.Workload) bool {
				return workload.UnsetQuotaReservationWithCondition(w, "Preempted", "to reclaim quota", clock.RealClock{}.Now())
			}, loose...); err != nil {
				t.Fatal(err)
			}
			var stale kueue.Workload
			if err := cl.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "job-1"}, &stale); err != nil {
				t.Fatal(err)
			}
			stale.ResourceVersion = "1"
			err = workloadpatching.PatchAdmissionStatus(ctx, cl, &stale, clock.RealClock{}, func(w *kueue.Workload) (bool, error) {
				return workload.SetQuotaReservation(w, admission, clock.RealClock{}), nil
			})
			if !apierrors.IsConflict(err) {
				t.Fatalf("a strict apply at a stale resourceVersion: %v, want a conflict", err)
			}
			final, err := tracker.ObjectTracker.Get(workloadsResource, "team-a", "job-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if final.(*kueue.Workload).Status.Admission != nil {
				t.Fatalf("the eviction's apply left the admission: %+v", final.(*kueue.Workload).Status.Admission)
			}
			shown, _ := json.Marshal(final)
			stored[side] = string(shown)
			values[side] = append(values[side], final)
		}
		if stored[0] != stored[1] {
			t.Fatalf("stored Workloads differ:\ndirect: %s\nfake:   %s", stored[0], stored[1])
		}
		for index := range returned[0] {
			if returned[0][index] != returned[1][index] {
				t.Fatalf("write %d: the writer's or the informer's object differs (%d):\ndirect: %s\nfake:   %s", index/2, index%2, returned[0][index], returned[1][index])
			}
		}
		for index := range values[0] {
			if !reflect.DeepEqual(values[0][index], values[1][index]) {
				t.Fatalf("object %d: equal as JSON, different as Go values:\ndirect: %#v\nfake:   %#v", index, values[0][index], values[1][index])
			}
		}
	})
}
