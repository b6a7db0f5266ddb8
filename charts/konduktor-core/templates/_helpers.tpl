{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "konduktor-core.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name, unless it already contains the chart name. */}}
{{- define "konduktor-core.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "konduktor-core.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. helm.sh/chart changes with each version, so it is never part of a selector. */}}
{{- define "konduktor-core.labels" -}}
helm.sh/chart: {{ include "konduktor-core.chart" . }}
{{ include "konduktor-core.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: konduktor
{{- end }}

{{- define "konduktor-core.selectorLabels" -}}
app.kubernetes.io/name: {{ include "konduktor-core.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "konduktor-core.controllerSelectorLabels" -}}
{{ include "konduktor-core.selectorLabels" . }}
app.kubernetes.io/component: health-controller
{{- end }}

{{- define "konduktor-core.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-health" (include "konduktor-core.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "konduktor-core.image" -}}
{{- $image := .Values.controller.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/* The health controller's identity in requests, as admission policies see it. */}}
{{- define "konduktor-core.controllerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "konduktor-core.serviceAccountName" .) }}
{{- end }}

{{/* The controller's leader-election Lease (konduktor.health.leader.LEASE_NAME). */}}
{{- define "konduktor-core.leaseName" -}}
konduktor-health
{{- end }}

{{/* The URL of a Service the controller reads (a controller.services entry, passed as .service with the chart as
.root): the short name in the release namespace, where the umbrella chart runs Loki and Prometheus, else the
namespace-qualified one. */}}
{{- define "konduktor-core.serviceURL" -}}
{{- $namespace := default .root.Release.Namespace .service.namespace }}
{{- if eq $namespace .root.Release.Namespace }}
{{- printf "http://%s:%v" .service.name .service.port }}
{{- else }}
{{- printf "http://%s.%s.svc:%v" .service.name $namespace .service.port }}
{{- end }}
{{- end }}

{{/*
Get on the kinds that own a Kueue Workload (Kueue's integrations the chart's Kueue runs): where the health controller
reads an owner's opt-out label and tells it of a quarantine, and where the fleet-events relay finds that owner on a
MultiKueue manager.
*/}}
{{- define "konduktor-core.ownerKindRules" -}}
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get]
- apiGroups: [jobset.x-k8s.io]
  resources: [jobsets]
  verbs: [get]
- apiGroups: [kubeflow.org]
  resources: [pytorchjobs, tfjobs, mpijobs, xgboostjobs, paddlejobs, jaxjobs]
  verbs: [get]
- apiGroups: [trainer.kubeflow.org]
  resources: [trainjobs]
  verbs: [get]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [get]
{{- end }}
