{{- define "kube-prometheus-stack.fullname" -}}
{{- .Values.fullnameOverride | default (printf "%s-kube-prometheus-stack" .Release.Name) | trunc 26 | trimSuffix "-" -}}
{{- end }}
{{- define "kube-prometheus-stack.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
{{- end }}
