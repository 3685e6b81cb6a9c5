{{/*
Name of the release's objects: fullnameOverride; else the release name when it contains the
chart's name (or nameOverride); else "<release>-<name>".
*/}}
{{- define "cloneset-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cloneset-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "cloneset-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Namespace of the manager and everything namespaced the chart installs. */}}
{{- define "cloneset-operator.namespace" -}}
{{- required "installation.namespace is required" .Values.installation.namespace -}}
{{- end -}}

{{- define "cloneset-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cloneset-operator.name" . }}
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

{{/* The manager's image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "cloneset-operator.image" -}}
{{- with .Values.manager.image -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (.tag | default $.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The manager's affinity: manager.affinity as given, Kruise's manager.nodeAffinity merged in, and
(unless manager.affinity has its own) a pod anti-affinity keeping replicas on different nodes.
*/}}
{{- define "cloneset-operator.affinity" -}}
{{- $aff := deepCopy (.Values.manager.affinity | default dict) -}}
{{- with .Values.manager.nodeAffinity -}}
{{- $_ := set $aff "nodeAffinity" (merge (deepCopy ($aff.nodeAffinity | default dict)) (deepCopy .)) -}}
{{- end -}}
{{- if not (hasKey $aff "podAntiAffinity") -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "cloneset-operator.selectorLabels" . | fromYaml)) -}}
{{- if eq .Values.manager.podAntiAffinity "soft" -}}
{{- $_ := set $aff "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- else if eq .Values.manager.podAntiAffinity "hard" -}}
{{- $_ := set $aff "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $aff -}}
{{- end -}}
