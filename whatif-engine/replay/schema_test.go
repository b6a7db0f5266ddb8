package replay

import (
	"reflect"
	"sort"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/managedfields/managedfieldstest"
	"sigs.k8s.io/yaml"
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
	named, err := newNamedTypeConverter(models)
	if err != nil {
		t.Fatal(err)
	}
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
