package replay

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// crdTypeConverter gives server-side apply the structural schemas of Kueue's CustomResourceDefinitions, built as
// the API server builds them for apply (apiextensions-apiserver's buildOpenAPIModelsForApply): each served
// version's OpenAPI v3 schema over the built-in meta types. Apply then merges Workload conditions by type and
// drops the fields a field manager stops setting, as on a real cluster.
func crdTypeConverter(crds []apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
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
	return managedfields.NewTypeConverter(merged.Components.Schemas, false)
}
