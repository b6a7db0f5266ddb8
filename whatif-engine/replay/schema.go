package replay

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// crdTypeConverter gives server-side apply the structural schemas of Kueue's CustomResourceDefinitions, built as
// the API server builds them for apply (apiextensions-apiserver's buildOpenAPIModelsForApply): each served
// version's OpenAPI v3 schema over the built-in meta types. Apply then merges Workload conditions by type and
// drops the fields a field manager stops setting, as on a real cluster.
func crdTypeConverter(crds []apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
	models, err := crdModels(crds)
	if err != nil {
		return nil, err
	}
	converter, err := newNamedTypeConverter(models)
	if err != nil {
		return nil, err
	}
	return converter, nil
}

// crdModels: the OpenAPI models of the CRDs' served versions and the built-in types they refer to.
func crdModels(crds []apiextensionsv1.CustomResourceDefinition) (map[string]*spec.Schema, error) {
	static := map[string]*spec.Schema{}
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/components/schemas/" + name) }
	for name, definition := range generatedopenapi.GetOpenAPIDefinitions(ref) {
		schema := definition.Schema
		static[name] = &schema
	}
	specs := []*spec3.OpenAPI{{
		Version:    "3.0.0",
		Info:       &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes CRD Swagger", Version: "v0.1.0"}},
		Components: &spec3.Components{Schemas: static},
	}}
	for i := range crds {
		for _, version := range crds[i].Spec.Versions {
			built, err := builder.BuildOpenAPIV3(&crds[i], version.Name, builder.Options{})
			if err != nil {
				return nil, fmt.Errorf("the schema of %s %s: %w", crds[i].Name, version.Name, err)
			}
			specs = append(specs, built)
		}
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, err
	}
	return merged.Components.Schemas, nil
}

// namedTypeConverter is apimachinery's managedfields type converter (NewTypeConverter, internal/typeconverter.go)
// over the same structured schema with every inlined object and list type given a name of its own. A CRD's
// schema is one type with everything below it inlined; server-side apply compares the schemas of the two sides
// at each field it merges (structured-merge-diff's mergingWalker.merge, Atom.Equals), and an inlined type is
// compared to its last field while a named one is compared by name: the same merge, at each field the cost of
// that field rather than of everything below it.
type namedTypeConverter struct {
	parser map[schema.GroupVersionKind]*typed.ParseableType
}

func newNamedTypeConverter(models map[string]*spec.Schema) (*namedTypeConverter, error) {
	converted, err := schemaconv.ToSchemaFromOpenAPI(models, false)
	if err != nil {
		return nil, fmt.Errorf("failed to convert models to schema: %w", err)
	}
	parser := &typed.Parser{Schema: smdschema.Schema{Types: nameInlinedTypes(converted.Types)}}
	c := &namedTypeConverter{parser: map[schema.GroupVersionKind]*typed.ParseableType{}}
	for name, model := range models {
		for _, gvk := range groupVersionKinds(model.Extensions) {
			parsed := parser.Type(name)
			c.parser[gvk] = &parsed
		}
	}
	return c, nil
}

func (c *namedTypeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	t := c.parser[gvk]
	if t == nil {
		return nil, fmt.Errorf("no corresponding type for %v", gvk)
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return t.FromUnstructured(u.UnstructuredContent(), opts...)
	}
	return t.FromStructured(obj, opts...)
}

func (c *namedTypeConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	if !value.AsValue().IsMap() {
		return nil, fmt.Errorf("failed to convert value to unstructured for type %T", value.AsValue().Unstructured())
	}
	return &typedObject{value: value}, nil
}

// typedObject is the unstructured object a typed value converts to, made when something reads more than its
// kind. On every apply, apimachinery's version converter turns the live object into an object once for each field
// manager only to read its version, and hands the typed value back unchanged when it is the version wanted
// (managedfields/internal/versionconverter.go Convert), as it always is here: each kind has one version. The field
// manager's own result goes through Kueue's scheme, which reads any runtime.Unstructured's content into the Go type.
type typedObject struct {
	value *typed.TypedValue
	made  *unstructured.Unstructured
}

func (o *typedObject) object() *unstructured.Unstructured {
	if o.made == nil {
		o.made = &unstructured.Unstructured{Object: o.value.AsValue().Unstructured().(map[string]any)}
	}
	return o.made
}

func (o *typedObject) GetObjectKind() schema.ObjectKind { return o }

// GroupVersionKind reads apiVersion and kind as unstructured.Unstructured's GroupVersionKind reads them.
func (o *typedObject) GroupVersionKind() schema.GroupVersionKind {
	if o.made != nil {
		return o.made.GroupVersionKind()
	}
	fields := o.value.AsValue().AsMap()
	text := func(name string) string {
		if v, ok := fields.Get(name); ok && v.IsString() {
			return v.AsString()
		}
		return ""
	}
	gv, err := schema.ParseGroupVersion(text("apiVersion"))
	if err != nil {
		return schema.GroupVersionKind{}
	}
	return gv.WithKind(text("kind"))
}

func (o *typedObject) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	o.object().SetGroupVersionKind(gvk)
}
func (o *typedObject) DeepCopyObject() runtime.Object         { return o.object().DeepCopy() }
func (o *typedObject) NewEmptyInstance() runtime.Unstructured { return o.object().NewEmptyInstance() }
func (o *typedObject) UnstructuredContent() map[string]any    { return o.object().UnstructuredContent() }
func (o *typedObject) SetUnstructuredContent(content map[string]any) {
	o.object().SetUnstructuredContent(content)
}
func (o *typedObject) IsList() bool { return o.object().IsList() }
func (o *typedObject) EachListItem(fn func(runtime.Object) error) error {
	return o.object().EachListItem(fn)
}
func (o *typedObject) EachListItemWithAlloc(fn func(runtime.Object) error) error {
	return o.object().EachListItemWithAlloc(fn)
}

// nameInlinedTypes moves every inlined object and list type into a type definition of its own, referred to by
// name; scalars stay inline. A reference keeps its element relationship, which Resolve applies to the named
// type as it did to the inlined one.
func nameInlinedTypes(types []smdschema.TypeDef) []smdschema.TypeDef {
	var named []smdschema.TypeDef
	var atom func(a *smdschema.Atom)
	ref := func(r *smdschema.TypeRef) {
		if r.NamedType != nil || (r.Inlined.Map == nil && r.Inlined.List == nil) {
			return
		}
		atom(&r.Inlined)
		name := fmt.Sprintf("io.konduktor.whatif.inlined.%d", len(named))
		named = append(named, smdschema.TypeDef{Name: name, Atom: r.Inlined})
		r.NamedType, r.Inlined = &name, smdschema.Atom{}
	}
	atom = func(a *smdschema.Atom) {
		if a.Map != nil {
			for index := range a.Map.Fields {
				ref(&a.Map.Fields[index].Type)
			}
			ref(&a.Map.ElementType)
		}
		if a.List != nil {
			ref(&a.List.ElementType)
		}
	}
	for index := range types {
		atom(&types[index].Atom)
	}
	return append(types, named...)
}

// groupVersionKinds reads a model's x-kubernetes-group-version-kind, as the managedfields type converter does.
func groupVersionKinds(extensions map[string]any) []schema.GroupVersionKind {
	list, _ := extensions["x-kubernetes-group-version-kind"].([]any)
	var found []schema.GroupVersionKind
	for _, item := range list {
		var fields func(string) (string, bool)
		switch m := item.(type) {
		case map[any]any:
			fields = func(key string) (string, bool) { value, ok := m[key].(string); return value, ok }
		case map[string]any:
			fields = func(key string) (string, bool) { value, ok := m[key].(string); return value, ok }
		default:
			continue
		}
		group, okGroup := fields("group")
		version, okVersion := fields("version")
		kind, okKind := fields("kind")
		if okGroup && okVersion && okKind && kind != "" {
			found = append(found, schema.GroupVersionKind{Group: group, Version: version, Kind: kind})
		}
	}
	return found
}
