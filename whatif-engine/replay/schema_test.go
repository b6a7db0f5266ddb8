package replay

import (
	"reflect"
	"sort"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/managedfields/managedfieldstest"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"
	"sigs.k8s.io/yaml"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingwl "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
)

// A CRD whose status nests objects and lists inline, as Kueue's do: conditions a list-map keyed by type.
const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              sets:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    count: {type: integer}
                    template: {type: object, properties: {labels: {type: object, additionalProperties: {type: string}}}}
          status:
            type: object
            properties:
              conditions:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [type]
                items:
                  type: object
                  required: [type]
                  properties:
                    type: {type: string}
                    status: {type: string}
                    reason: {type: string}
              admission:
                type: object
                properties:
                  queue: {type: string}
                  assignments:
                    type: array
                    x-kubernetes-list-type: atomic
                    items: {type: object, properties: {name: {type: string}, flavors: {type: object, additionalProperties: {type: string}}}}
`

func widget(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		t.Fatal(err)
	}
	return obj
}

// withoutManagedFields: the live object but for its managed fields, which fieldsByManager compares.
func withoutManagedFields(manager managedfieldstest.TestFieldManager) runtime.Object {
	live := manager.Live().DeepCopyObject().(*unstructured.Unstructured)
	unstructured.RemoveNestedField(live.Object, "metadata", "managedFields")
	return live
}

// fieldsByManager: the managed fields without their times, by manager and operation. An entry's time is the wall
// clock's second of its write, and apimachinery orders the entries by operation, then that second, then manager
// (managedfields/internal sortEncodedManagedFields): two writes either side of a second's turn would otherwise
// differ in order and time alone.
func fieldsByManager(manager managedfieldstest.TestFieldManager) []metav1.ManagedFieldsEntry {
	entries := []metav1.ManagedFieldsEntry{}
	for _, entry := range manager.ManagedFields() {
		entry.Time = nil
		entries = append(entries, entry)
	}
	sort.Slice(entries, func(a, b int) bool {
		if entries[a].Manager != entries[b].Manager {
			return entries[a].Manager < entries[b].Manager
		}
		return entries[a].Operation < entries[b].Operation
	})
	return entries
}

// Named inlined types merge as the inlined ones: the same objects and managed fields after applies and updates
// by several managers, conditions merged by type and a field a manager stops setting gone.
func TestNamedInlinedTypesMergeAsInlinedOnes(t *testing.T) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal([]byte(widgetCRD), &crd); err != nil {
		t.Fatal(err)
	}
	models, err := crdModels([]apiextensionsv1.CustomResourceDefinition{crd})
	if err != nil {
		t.Fatal(err)
	}
	inlined, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := newNamedTypeConverter(models)
	if err != nil {
		t.Fatal(err)
	}
	named := madeConverter{lazy} // the test field manager keeps what the type converter gives, as it gives it
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	head := "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: team-a}\n"
	steps := []struct {
		manager, manifest string
		apply             bool
	}{
		{"creator", head + "spec: {sets: [{name: a, count: 1, template: {labels: {app: one}}}]}", false},
		{"creator", head + "spec: {sets: [{name: a, count: 2, template: {labels: {app: two}}}, {name: b, count: 1}]}", false},
		{"scheduler", head + "status: {conditions: [{type: QuotaReserved, status: 'True'}, {type: Admitted, status: 'True'}], admission: {queue: q, assignments: [{name: a, flavors: {gpu: h100}}]}}", true},
		{"job", head + "status: {conditions: [{type: PodsReady, status: 'True', reason: Started}]}", true},
		{"scheduler", head + "status: {conditions: [{type: QuotaReserved, status: 'False', reason: Pending}]}", true},
	}
	managers := map[string]managedfieldstest.TestFieldManager{
		"inlined": managedfieldstest.NewTestFieldManager(inlined, gvk),
		"named":   managedfieldstest.NewTestFieldManager(named, gvk),
	}
	for index, step := range steps {
		for name, manager := range managers {
			var err error
			if step.apply {
				err = manager.Apply(widget(t, step.manifest), step.manager, true)
			} else {
				err = manager.Update(widget(t, step.manifest), step.manager)
			}
			if err != nil {
				t.Fatalf("step %d, %s types: %v", index, name, err)
			}
		}
		if a, b := withoutManagedFields(managers["inlined"]), withoutManagedFields(managers["named"]); !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d: objects differ:\ninlined %v\nnamed   %v", index, a, b)
		}
		if a, b := fieldsByManager(managers["inlined"]), fieldsByManager(managers["named"]); !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d: managed fields differ:\ninlined %v\nnamed   %v", index, a, b)
		}
	}
	live := managers["named"].Live().(*unstructured.Unstructured)
	conditions, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	types := map[string]bool{}
	for _, condition := range conditions {
		types[condition.(map[string]any)["type"].(string)] = true
	}
	if !reflect.DeepEqual(types, map[string]bool{"QuotaReserved": true, "PodsReady": true}) {
		t.Fatalf("conditions %v: want QuotaReserved (reapplied) and PodsReady (another manager's); Admitted dropped", conditions)
	}
	if _, found, _ := unstructured.NestedMap(live.Object, "status", "admission"); found {
		t.Fatalf("the admission the scheduler stopped applying is still there: %v", live.Object["status"])
	}
}

// madeConverter makes the typed objects its converter gives whole, as Kueue's scheme does when the field manager
// converts them to their Go types.
type madeConverter struct{ *namedTypeConverter }

func (c madeConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	obj, err := c.namedTypeConverter.TypedToObject(value)
	if err != nil {
		return nil, err
	}
	return obj.(*typedObject).object(), nil
}

// A typed value's object reads the kind of the object it stands for without making it, and converts through
// Kueue's scheme to the same Workload as that object.
func TestTypedObjectStandsForTheUnstructuredObject(t *testing.T) {
	crds := kueueCRDs(t)
	models, err := crdModels(crds)
	if err != nil {
		t.Fatal(err)
	}
	converter, err := newNamedTypeConverter(models)
	if err != nil {
		t.Fatal(err)
	}
	scheme := Scheme()
	wl := testingwl.MakeWorkload("job-1", "team-a").Queue("default").Request("nvidia.com/gpu", "8").
		ReserveQuotaAt(testingwl.MakeAdmission("team-a").Obj(), time.Unix(1_800_000_000, 0)).Obj()
	wl.SetGroupVersionKind(kueue.SchemeGroupVersion.WithKind("Workload"))
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wl)
	if err != nil {
		t.Fatal(err)
	}
	for name, source := range map[string]runtime.Object{"typed": wl, "unstructured": &unstructured.Unstructured{Object: content}} {
		value, err := converter.ObjectToTyped(source)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		obj, err := converter.TypedToObject(value)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lazy := obj.(*typedObject)
		made := &unstructured.Unstructured{Object: value.AsValue().Unstructured().(map[string]any)}
		if got, want := lazy.GetObjectKind().GroupVersionKind(), made.GroupVersionKind(); got != want || lazy.made != nil {
			t.Fatalf("%s: kind %v (made: %t), want %v unmade", name, got, lazy.made != nil, want)
		}
		fromLazy, err := scheme.ConvertToVersion(lazy, kueue.SchemeGroupVersion)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fromMade, err := scheme.ConvertToVersion(made, kueue.SchemeGroupVersion)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(fromLazy, fromMade) || fromLazy.(*kueue.Workload).Status.Admission == nil {
			t.Fatalf("%s: the scheme converts the two differently:\n%+v\n%+v", name, fromLazy, fromMade)
		}
	}
	if _, err := converter.TypedToObject(typed.AsTypedUnvalidated(value.NewValueInterface("text"), nil, smdschema.TypeRef{})); err == nil {
		t.Fatal("a value that is no object converted")
	}
}
