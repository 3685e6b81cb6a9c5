{{/* Name of the release's objects: the release name, or "<release>-cloneset-operator". */}}
{{- define "cloneset-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Namespace of the manager and everything namespaced the chart installs. */}}
{{- define "cloneset-operator.namespace" -}}
{{- required "installation.namespace is required" .Values.installation.namespace -}}
{{- end -}}

{{- define "cloneset-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cloneset-operator.labels" -}}
{{ include "cloneset-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: manager
app.kubernetes.io/part-of: cloneset-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "cloneset-operator.image" -}}
{{- printf "%s:%s" .Values.manager.image.repository (.Values.manager.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
